//! DIST messages on the wire: [`Repr::parse`] checks every length and field of a message
//! and [`Repr::emit`] writes one, for every message type.

use super::*;

impl Repr {
    /// Parses a DIST message (the Ethernet payload; trailing padding is ignored).
    pub fn parse(b: &[u8]) -> Result<Repr, Error> {
        need(b, HEADER_LEN).map_err(Error::Truncated)?;
        if b[0] != VERSION {
            return Err(Error::BadVersion(b[0]));
        }
        let (kind, length, seq) = (b[1] & !auth::FLAG, be16(b, 2) as usize, be32(b, 4));
        let trailer = if b[1] & auth::FLAG != 0 {
            auth::TRAILER_LEN
        } else {
            0
        };
        need(b, HEADER_LEN + length + trailer).map_err(Error::Truncated)?;
        let body = &b[HEADER_LEN..HEADER_LEN + length];
        let bad = Error::BadLength { kind, length };
        let msg = match kind {
            kind::HELLO => hello(body, length, bad)?,
            kind::PORTS => ports(body, length, bad)?,
            kind::BALANCE => balance(body, length, bad)?,
            kind::VIRTUAL_CP => virtual_cp(body, length, bad)?,
            kind::ROUTES => routes(body, length, bad)?,
            kind::FIB_ACK => fib_ack(body, length, bad)?,
            kind::COUNTERS => counters(body, length, bad)?,
            kind::FILTERS => FilterChunk::parse(body, bad)?,
            kind::FILTERS_ACK => FiltersAck::parse(body, bad)?,
            kind::FLOW_CONFIG => FlowConfig::parse(body, bad)?,
            kind::FLOW_RECORDS => flows::parse_records(body, bad)?,
            t => return Err(Error::UnknownType(t)),
        };
        Ok(Repr { seq, msg })
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.msg.body_len()
    }

    /// Checks that the message fits the format: counts in range, a body under 64 KiB,
    /// VLAN ids and prefix lengths valid.
    pub fn validate(&self) -> Result<(), Error> {
        let too_many = |field, n: usize, max: usize| {
            if n > max {
                Err(Error::BadField {
                    field,
                    value: n as u32,
                })
            } else {
                Ok(())
            }
        };
        match &self.msg {
            Message::Hello(h) => {
                too_many("ports", h.ports.len(), 255)?;
                for p in &h.ports {
                    prefix_len(p.prefix_len)?;
                    vlan(p.vlan)?;
                }
                too_many("hello IPv6 addresses", h.addrs6.len(), 255)?;
                for a in &h.addrs6 {
                    too_many(
                        "hello address port",
                        a.port as usize,
                        h.ports.len().max(1) - 1,
                    )?;
                    prefix_len6(a.prefix_len)?;
                }
            }
            Message::Ports { ports } => {
                too_many("ports", ports.len(), 255)?;
                for p in ports {
                    prefix_len(p.prefix_len)?;
                    vlan(p.vlan)?;
                }
            }
            Message::Balance { entries, .. } => {
                too_many("entries", entries.len(), (u16::MAX as usize - 4) / 10)?
            }
            Message::VirtualCp { .. } | Message::FibAck(_) => {}
            Message::Filters(c) => c.check()?,
            Message::FiltersAck(a) => a.check()?,
            Message::FlowConfig(c) => c.check()?,
            Message::FlowRecords(rs) => flows::check_records(rs)?,
            Message::Counters(c) => {
                check_name("element", &c.element)?;
                too_many("ports", c.ports.len(), 255)?;
                for p in &c.ports {
                    check_name("port", &p.name)?;
                }
                for (n, _) in c.drops.iter().chain(&c.events) {
                    check_name("counter", n)?;
                }
                too_many("counts", c.drops.len() + c.events.len(), u16::MAX as usize)?;
                too_many("length", self.msg.body_len(), u16::MAX as usize)?;
            }
            Message::Routes(b) => {
                too_many("routes", b.routes.len(), u16::MAX as usize)?;
                for r in &b.routes {
                    match r.prefix {
                        IpAddr::V4(_) => prefix_len(r.len)?,
                        IpAddr::V6(_) => prefix_len6(r.len)?,
                    };
                    too_many("gateways", r.via.len(), MAX_GATEWAYS)?;
                    if r.via.iter().any(|g| g.is_ipv4() != r.prefix.is_ipv4()) {
                        return Err(Error::BadField {
                            field: "gateway_family",
                            value: r.len as u32,
                        });
                    }
                }
                too_many("length", self.msg.body_len(), u16::MAX as usize)?;
            }
        }
        Ok(())
    }

    /// Writes the message at the start of `buf`, which must hold `buffer_len()` bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        self.validate()?;
        need(buf, self.buffer_len()).map_err(Error::Truncated)?;
        let len = self.msg.body_len();
        buf[0] = VERSION;
        buf[1] = self.msg.kind();
        put16(buf, 2, len as u16);
        buf[4..8].copy_from_slice(&self.seq.to_be_bytes());
        let body = &mut buf[HEADER_LEN..HEADER_LEN + len];
        body.fill(0);
        match &self.msg {
            Message::Hello(h) => {
                body[0] = h.element.code();
                body[1] = h.ports.len() as u8;
                put16(body, 2, h.interval_ms);
                body[4] = h.priority;
                body[5] = if h.active { HELLO_ACTIVE } else { 0 }
                    | match h.state {
                        Some(s) if s.table => HELLO_STATE | HELLO_TABLE,
                        Some(_) => HELLO_STATE,
                        None => 0,
                    };
                body[6] = h.addrs6.len() as u8;
                body[8..16].copy_from_slice(&h.rx_packets.to_be_bytes());
                body[16..24].copy_from_slice(&h.tx_packets.to_be_bytes());
                body[24..32].copy_from_slice(&h.dropped.to_be_bytes());
                for (i, p) in h.ports.iter().enumerate() {
                    let o = &mut body[HELLO_FIXED_LEN + i * HELLO_PORT_LEN..];
                    o[0..6].copy_from_slice(&p.mac.0);
                    o[6..10].copy_from_slice(&p.addr.octets());
                    o[10] = p.prefix_len;
                    o[11] = p.role.code();
                    put16(o, 12, p.vlan);
                    o[14..18].copy_from_slice(&p.speed_mbps.to_be_bytes());
                }
                let at6 = HELLO_FIXED_LEN + h.ports.len() * HELLO_PORT_LEN;
                for (i, a) in h.addrs6.iter().enumerate() {
                    let o = &mut body[at6 + i * HELLO_ADDR6_LEN..];
                    o[0] = a.port;
                    o[1] = a.prefix_len;
                    o[2..18].copy_from_slice(&a.addr.octets());
                }
                if let Some(st) = &h.state {
                    let o = &mut body[at6 + h.addrs6.len() * HELLO_ADDR6_LEN..];
                    o[0..8].copy_from_slice(&st.incarnation.to_be_bytes());
                    o[8..12].copy_from_slice(&st.epoch.to_be_bytes());
                    o[12..16].copy_from_slice(&st.version.to_be_bytes());
                    o[16..20].copy_from_slice(&st.routes.to_be_bytes());
                    o[24..32].copy_from_slice(&st.digest.to_be_bytes());
                }
            }
            Message::Ports { ports } => {
                body[0] = ports.len() as u8;
                for (i, p) in ports.iter().enumerate() {
                    let o = &mut body[1 + i * PORT_CONFIG_LEN..];
                    o[0] = p.index;
                    o[1] = p.role.code();
                    put16(o, 2, p.vlan);
                    o[4..8].copy_from_slice(&p.addr.octets());
                    o[8] = p.prefix_len;
                }
            }
            Message::Balance { flush, entries } => {
                body[0] = if *flush { BALANCE_FLUSH } else { 0 };
                put16(body, 2, entries.len() as u16);
                for (i, e) in entries.iter().enumerate() {
                    let o = &mut body[BALANCE_FIXED_LEN + i * BALANCE_ENTRY_LEN..];
                    o[0..6].copy_from_slice(&e.mac.0);
                    o[6] = e.port;
                    put16(o, 8, e.weight);
                }
            }
            Message::VirtualCp { mac, port } => {
                body[0..6].copy_from_slice(&mac.0);
                body[6] = *port;
            }
            Message::Routes(b) => {
                body[0..4].copy_from_slice(&b.epoch.to_be_bytes());
                body[4..8].copy_from_slice(&b.version.to_be_bytes());
                body[8..12].copy_from_slice(&b.base.to_be_bytes());
                body[12] = if b.snapshot { ROUTES_SNAPSHOT } else { 0 }
                    | if b.last { ROUTES_LAST } else { 0 };
                put16(body, 14, b.routes.len() as u16);
                let mut at = ROUTES_FIXED_LEN;
                for r in &b.routes {
                    body[at] = r.len;
                    body[at + 1] =
                        r.via.len() as u8 | if r.prefix.is_ipv6() { ROUTE_IPV6 } else { 0 };
                    let mut put = |at: &mut usize, a: &IpAddr| match a {
                        IpAddr::V4(a) => {
                            body[*at..*at + 4].copy_from_slice(&a.octets());
                            *at += 4;
                        }
                        IpAddr::V6(a) => {
                            body[*at..*at + 16].copy_from_slice(&a.octets());
                            *at += 16;
                        }
                    };
                    at += 2;
                    put(&mut at, &r.prefix);
                    for g in &r.via {
                        put(&mut at, g);
                    }
                }
            }
            Message::FibAck(a) => {
                body[0..4].copy_from_slice(&a.epoch.to_be_bytes());
                body[4..8].copy_from_slice(&a.version.to_be_bytes());
                body[8..12].copy_from_slice(&a.snap_epoch.to_be_bytes());
                body[12..16].copy_from_slice(&a.snap_version.to_be_bytes());
                body[16..20].copy_from_slice(&a.parts.to_be_bytes());
                body[20..24].copy_from_slice(&a.routes.to_be_bytes());
                body[24..28].copy_from_slice(&a.unresolved.to_be_bytes());
                body[28..36].copy_from_slice(&a.digest.to_be_bytes());
                body[36..44].copy_from_slice(&a.incarnation.to_be_bytes());
            }
            Message::Counters(c) => {
                let mut at = 0;
                put_name(body, &mut at, &c.element);
                body[at] = c.ports.len() as u8;
                at += 1;
                for p in &c.ports {
                    body[at] = if p.external { PORT_EXTERNAL } else { 0 };
                    at += 1;
                    put_name(body, &mut at, &p.name);
                    for v in [p.rx_packets, p.rx_bytes, p.tx_packets, p.tx_bytes] {
                        body[at..at + 8].copy_from_slice(&v.to_be_bytes());
                        at += 8;
                    }
                }
                put16(body, at, (c.drops.len() + c.events.len()) as u16);
                at += 2;
                let all = c.drops.iter().map(|d| (COUNT_DROP, d));
                for (k, (n, v)) in all.chain(c.events.iter().map(|e| (COUNT_EVENT, e))) {
                    body[at] = k;
                    at += 1;
                    put_name(body, &mut at, n);
                    body[at..at + 8].copy_from_slice(&v.to_be_bytes());
                    at += 8;
                }
            }
            Message::Filters(c) => c.emit(body),
            Message::FiltersAck(a) => a.emit(body),
            Message::FlowConfig(c) => c.emit(body),
            Message::FlowRecords(rs) => flows::emit_records(rs, body),
        }
        Ok(())
    }

    /// A whole Ethernet frame (untagged, padded to the 60-byte minimum) carrying the message.
    pub fn to_frame(&self, src: MacAddr, dst: MacAddr) -> Result<Vec<u8>, Error> {
        let eth = crate::ethernet::HEADER_LEN;
        let mut f = vec![0u8; (eth + self.buffer_len()).max(60)];
        crate::ethernet::Repr {
            dst,
            src,
            vlan: None,
            ethertype: ETHERTYPE,
        }
        .emit(&mut f)
        .map_err(|crate::ethernet::Error::Truncated(t)| Error::Truncated(t))?;
        self.emit(&mut f[eth..])?;
        Ok(f)
    }
}

/// The body of a HELLO message (kind::HELLO), `length` bytes.
fn hello(body: &[u8], length: usize, bad: Error) -> Result<Message, Error> {
    if length < HELLO_FIXED_LEN {
        return Err(bad);
    }
    let element = match body[0] {
        1 => ElementKind::Balancer,
        2 => ElementKind::Forwarder,
        3 => ElementKind::Controller,
        v => {
            return Err(Error::BadField {
                field: "element",
                value: v as u32,
            })
        }
    };
    let count = body[1] as usize;
    let count6 = body[6] as usize;
    let at6 = HELLO_FIXED_LEN + count * HELLO_PORT_LEN;
    let at_state = at6 + count6 * HELLO_ADDR6_LEN;
    let has_state = body[5] & HELLO_STATE != 0;
    if length != at_state + if has_state { HELLO_STATE_LEN } else { 0 } {
        return Err(bad);
    }
    let state = has_state.then(|| {
        let b = &body[at_state..];
        HelloState {
            incarnation: be64(b, 0),
            table: body[5] & HELLO_TABLE != 0,
            epoch: be32(b, 8),
            version: be32(b, 12),
            routes: be32(b, 16),
            digest: be64(b, 24),
        }
    });
    let mut addrs6 = Vec::with_capacity(count6);
    for i in 0..count6 {
        let a = &body[at6 + i * HELLO_ADDR6_LEN..];
        if a[0] as usize >= count {
            return Err(Error::BadField {
                field: "hello address port",
                value: a[0] as u32,
            });
        }
        addrs6.push(HelloAddr6 {
            port: a[0],
            prefix_len: prefix_len6(a[1])?,
            addr: ip6(a, 2),
        });
    }
    let mut ports = Vec::with_capacity(count);
    for i in 0..count {
        let p = &body[HELLO_FIXED_LEN + i * HELLO_PORT_LEN..];
        ports.push(HelloPort {
            mac: MacAddr::from_slice(&p[0..6]),
            addr: ip(p, 6),
            prefix_len: prefix_len(p[10])?,
            role: PortRole::from_code(p[11])?,
            vlan: vlan(be16(p, 12))?,
            speed_mbps: be32(p, 14),
        });
    }
    Ok(Message::Hello(Hello {
        element,
        interval_ms: be16(body, 2),
        rx_packets: be64(body, 8),
        tx_packets: be64(body, 16),
        dropped: be64(body, 24),
        priority: body[4],
        active: body[5] & HELLO_ACTIVE != 0,
        ports,
        addrs6,
        state,
    }))
}

/// The body of a PORTS message (kind::PORTS), `length` bytes.
fn ports(body: &[u8], length: usize, bad: Error) -> Result<Message, Error> {
    let count = *body.first().ok_or(bad)? as usize;
    if length != 1 + count * PORT_CONFIG_LEN {
        return Err(bad);
    }
    let mut ports = Vec::with_capacity(count);
    for i in 0..count {
        let p = &body[1 + i * PORT_CONFIG_LEN..];
        ports.push(PortConfig {
            index: p[0],
            role: PortRole::from_code(p[1])?,
            vlan: vlan(be16(p, 2))?,
            addr: ip(p, 4),
            prefix_len: prefix_len(p[8])?,
        });
    }
    Ok(Message::Ports { ports })
}

/// The body of a BALANCE message (kind::BALANCE), `length` bytes.
fn balance(body: &[u8], length: usize, bad: Error) -> Result<Message, Error> {
    if length < BALANCE_FIXED_LEN {
        return Err(bad);
    }
    let count = be16(body, 2) as usize;
    if length != BALANCE_FIXED_LEN + count * BALANCE_ENTRY_LEN {
        return Err(bad);
    }
    let entries = (0..count)
        .map(|i| {
            let e = &body[BALANCE_FIXED_LEN + i * BALANCE_ENTRY_LEN..];
            BalanceEntry {
                mac: MacAddr::from_slice(&e[0..6]),
                port: e[6],
                weight: be16(e, 8),
            }
        })
        .collect();
    Ok(Message::Balance {
        flush: body[0] & BALANCE_FLUSH != 0,
        entries,
    })
}

/// The body of a VIRTUAL_CP message (kind::VIRTUAL_CP), `length` bytes.
fn virtual_cp(body: &[u8], length: usize, bad: Error) -> Result<Message, Error> {
    if length != VIRTUAL_CP_LEN {
        return Err(bad);
    }
    Ok(Message::VirtualCp {
        mac: MacAddr::from_slice(&body[0..6]),
        port: body[6],
    })
}

/// The body of a ROUTES message (kind::ROUTES), `length` bytes.
fn routes(body: &[u8], length: usize, bad: Error) -> Result<Message, Error> {
    if length < ROUTES_FIXED_LEN {
        return Err(bad);
    }
    let count = be16(body, 14) as usize;
    let mut routes = Vec::with_capacity(count.min(length / ROUTE_ENTRY_FIXED_LEN));
    let mut at = ROUTES_FIXED_LEN;
    for _ in 0..count {
        if at + 2 > length {
            return Err(bad);
        }
        let six = body[at + 1] & ROUTE_IPV6 != 0;
        let n = (body[at + 1] & !ROUTE_IPV6) as usize;
        if n > MAX_GATEWAYS {
            return Err(Error::BadField {
                field: "gateways",
                value: n as u32,
            });
        }
        let (fixed, width) = if six {
            (ROUTE_ENTRY6_FIXED_LEN, 16)
        } else {
            (ROUTE_ENTRY_FIXED_LEN, 4)
        };
        if at + fixed + width * n > length {
            return Err(bad);
        }
        let addr = |at: usize| -> IpAddr {
            if six {
                ip6(body, at).into()
            } else {
                ip(body, at).into()
            }
        };
        let len = if six {
            prefix_len6(body[at])?
        } else {
            prefix_len(body[at])?
        };
        let prefix = addr(at + 2);
        at += fixed;
        let via = (0..n).map(|i| addr(at + width * i)).collect();
        at += width * n;
        routes.push(RouteEntry { prefix, len, via });
    }
    if at != length {
        return Err(bad);
    }
    Ok(Message::Routes(RouteBatch {
        epoch: be32(body, 0),
        version: be32(body, 4),
        base: be32(body, 8),
        snapshot: body[12] & ROUTES_SNAPSHOT != 0,
        last: body[12] & ROUTES_LAST != 0,
        routes,
    }))
}

/// The body of a FIB_ACK message (kind::FIB_ACK), `length` bytes.
fn fib_ack(body: &[u8], length: usize, bad: Error) -> Result<Message, Error> {
    if length != FIB_ACK_LEN && length != FIB_ACK_LEN_V0 {
        return Err(bad);
    }
    Ok(Message::FibAck(FibAck {
        epoch: be32(body, 0),
        version: be32(body, 4),
        snap_epoch: be32(body, 8),
        snap_version: be32(body, 12),
        parts: be32(body, 16),
        routes: be32(body, 20),
        unresolved: be32(body, 24),
        digest: be64(body, 28),
        incarnation: if length == FIB_ACK_LEN {
            be64(body, 36)
        } else {
            0
        },
    }))
}

/// The body of a COUNTERS message (kind::COUNTERS), `length` bytes.
fn counters(body: &[u8], length: usize, bad: Error) -> Result<Message, Error> {
    let mut at = 0;
    let element = take_name(body, &mut at, "element", bad)?;
    let nports = *body.get(at).ok_or(bad)? as usize;
    at += 1;
    let mut ports = Vec::with_capacity(nports);
    for _ in 0..nports {
        let flags = *body.get(at).ok_or(bad)?;
        at += 1;
        let name = take_name(body, &mut at, "port", bad)?;
        if at + 32 > length {
            return Err(bad);
        }
        ports.push(PortCounts {
            name,
            external: flags & PORT_EXTERNAL != 0,
            rx_packets: be64(body, at),
            rx_bytes: be64(body, at + 8),
            tx_packets: be64(body, at + 16),
            tx_bytes: be64(body, at + 24),
        });
        at += 32;
    }
    if at + 2 > length {
        return Err(bad);
    }
    let n = be16(body, at) as usize;
    at += 2;
    let (mut drops, mut events) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let k = *body.get(at).ok_or(bad)?;
        at += 1;
        let name = take_name(body, &mut at, "counter", bad)?;
        if at + 8 > length {
            return Err(bad);
        }
        let v = be64(body, at);
        at += 8;
        match k {
            COUNT_DROP => drops.push((name, v)),
            COUNT_EVENT => events.push((name, v)),
            k => {
                return Err(Error::BadField {
                    field: "count kind",
                    value: k as u32,
                })
            }
        }
    }
    if at != length {
        return Err(bad);
    }
    Ok(Message::Counters(CounterReport {
        element,
        ports,
        drops,
        events,
    }))
}
