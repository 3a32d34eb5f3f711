//! `tessera switch`: a learning Ethernet switch whose output ports have a capacity and a
//! buffer, and serve their input ports either in arrival order (FIFO, as most switches
//! do) or fairly (one queue per input port, deficit round robin), so that no input can
//! starve another. Usable as the interconnection of the multistage router, and as a
//! device under test of `tessera bench contend` (docs/switch.md).
//!
//! The path of a frame: learn its source MAC on its input port; look its destination up
//! (a known unicast MAC: that port; otherwise every other port: flooding); queue it on
//! each output port (a copy per port when flooding). Each output port sends its queues out
//! at its capacity, counted on the wire (the frame, its FCS, preamble and inter-frame gap:
//! [`WIRE_OVERHEAD`] bytes more than the frame the port sees), then holds each frame for
//! its added delay, if any (a link's propagation delay: the kernel here has no netem).

use crate::buf::{Pkt, Pool, TxQueues};
use crate::counters::{Counters, Drop, Event};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::MacAddr;

/// Bytes a frame takes on the wire beyond what the port sees: FCS (4), preamble and start
/// of frame (8), inter-frame gap (12).
pub const WIRE_OVERHEAD: usize = 24;

/// Deficit round robin quantum: bytes on the wire a queue may send per round. At least
/// the largest frame, so every round sends something.
pub const QUANTUM: usize = 9216 + 18 + WIRE_OVERHEAD;

/// How far a port's schedule may fall behind the clock and catch up (the run loop wakes
/// this late at worst): the largest burst above the port's capacity.
pub const CATCH_UP: Duration = Duration::from_millis(1);

/// Learned MAC addresses at most; beyond, new sources are not learned (counted) and
/// frames to them are flooded.
pub const MAX_MACS: usize = 65_536;

/// How an output port serves its input queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One queue in arrival order.
    Fifo,
    /// One queue per input port, deficit round robin.
    Fair,
}

/// One port of the switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    pub name: String,
    /// Output capacity in bit/s on the wire; None: as fast as the port takes frames.
    pub capacity_bps: Option<u64>,
    /// Output buffer in bytes (frames as the port sees them): the whole queue in FIFO
    /// mode; shared equally between the input queues in fair mode.
    pub buffer_bytes: usize,
    /// Added delay after the output queue.
    pub delay: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchConfig {
    pub ports: Vec<PortConfig>,
    pub mode: Mode,
    /// A learned address is forgotten after this long without a frame from it.
    pub ageing: Duration,
}

/// One output port: its queues, its schedule and its delay line (the Axon's too).
pub(crate) struct OutPort {
    /// FIFO: one queue; fair: one per input port.
    queues: Vec<VecDeque<Pkt>>,
    bytes: Vec<usize>,
    limit: usize,
    deficit: Vec<usize>,
    /// The queue got its quantum this round.
    topped: Vec<bool>,
    /// Fair: the queues with frames, in service order.
    active: VecDeque<usize>,
    /// Nanoseconds a wire byte takes (capacity); 0: no shaping.
    ns_per_byte: f64,
    /// When the wire is free again.
    free_at: Option<Instant>,
    delay: Duration,
    delayed: VecDeque<(Instant, Pkt)>,
}

impl OutPort {
    pub(crate) fn new(cfg: &PortConfig, inputs: usize, mode: Mode) -> OutPort {
        let n = match mode {
            Mode::Fifo => 1,
            Mode::Fair => inputs.max(1),
        };
        OutPort {
            queues: (0..n).map(|_| VecDeque::new()).collect(),
            bytes: vec![0; n],
            limit: match mode {
                Mode::Fifo => cfg.buffer_bytes,
                Mode::Fair => cfg.buffer_bytes / inputs.saturating_sub(1).max(1),
            },
            deficit: vec![0; n],
            topped: vec![false; n],
            active: VecDeque::new(),
            ns_per_byte: cfg.capacity_bps.map_or(0.0, |c| 8e9 / c.max(1) as f64),
            free_at: None,
            delay: cfg.delay,
            delayed: VecDeque::new(),
        }
    }

    /// Takes a port's new capacity, buffer and delay in place. Queued frames stay: a
    /// smaller buffer refuses new ones until the queue is below it, and frames already in
    /// the delay line keep their time.
    pub(crate) fn reshape(&mut self, cfg: &PortConfig, inputs: usize, mode: Mode) {
        let fresh = OutPort::new(cfg, inputs, mode);
        self.limit = fresh.limit;
        self.ns_per_byte = fresh.ns_per_byte;
        self.delay = fresh.delay;
        if self.ns_per_byte == 0.0 {
            self.free_at = None;
        }
    }

    /// Frames in the queues and the delay line.
    pub(crate) fn queued_frames(&self) -> usize {
        self.queues.iter().map(|q| q.len()).sum::<usize>() + self.delayed.len()
    }

    pub(crate) fn queued(&self) -> bool {
        !self.active.is_empty() || !self.delayed.is_empty()
    }

    /// Queues `p` from input `input` (its queue in fair mode); gives it back if full.
    pub(crate) fn enqueue(&mut self, p: Pkt, input: usize) -> Result<(), Pkt> {
        let q = input.min(self.queues.len() - 1);
        let len = p.data.len();
        if self.bytes[q] + len > self.limit {
            return Err(p);
        }
        if self.queues[q].is_empty() {
            self.active.push_back(q);
        }
        self.bytes[q] += len;
        self.queues[q].push_back(p);
        Ok(())
    }

    /// Sends what the schedule allows by `now`, through the delay line, to `out`.
    pub(crate) fn dequeue(&mut self, now: Instant, out: &mut Vec<Pkt>) {
        while let Some(&q) = self.active.front() {
            if self.ns_per_byte > 0.0 && self.free_at.is_some_and(|t| t > now) {
                break;
            }
            if !self.topped[q] {
                self.deficit[q] += QUANTUM;
                self.topped[q] = true;
            }
            let Some(head) = self.queues[q].front() else {
                self.active.pop_front();
                continue;
            };
            let wire = head.data.len() + WIRE_OVERHEAD;
            if wire > self.deficit[q] {
                // Its round is over: the next queue's turn.
                self.topped[q] = false;
                self.active.rotate_left(1);
                continue;
            }
            let Some(p) = self.queues[q].pop_front() else {
                continue;
            };
            self.deficit[q] -= wire;
            self.bytes[q] -= p.data.len();
            if self.queues[q].is_empty() {
                self.deficit[q] = 0;
                self.topped[q] = false;
                self.active.pop_front();
            }
            if self.ns_per_byte > 0.0 {
                // The wire is busy for this frame from when it was free (or from a little
                // before now, if the run loop woke late: catch up that much, no more).
                let start = match self.free_at {
                    Some(t) if t + CATCH_UP > now => t,
                    _ => now,
                };
                self.free_at =
                    Some(start + Duration::from_nanos((wire as f64 * self.ns_per_byte) as u64));
            }
            if self.delay.is_zero() {
                out.push(p);
            } else {
                self.delayed.push_back((now + self.delay, p));
            }
        }
        while self.delayed.front().is_some_and(|(t, _)| *t <= now) {
            if let Some((_, p)) = self.delayed.pop_front() {
                out.push(p);
            }
        }
    }
}

/// The switch element.
pub struct Switch {
    pub cfg: SwitchConfig,
    macs: HashMap<MacAddr, (u16, Instant)>,
    out: Vec<OutPort>,
    sent: Vec<Pkt>,
    pub pool: Pool,
    pub counters: Arc<Counters>,
    next_ageing: Instant,
}

impl Switch {
    pub fn new(cfg: SwitchConfig, counters: Arc<Counters>, now: Instant) -> Switch {
        let n = cfg.ports.len();
        let out = cfg
            .ports
            .iter()
            .map(|p| OutPort::new(p, n, cfg.mode))
            .collect();
        Switch {
            cfg,
            macs: HashMap::new(),
            out,
            sent: Vec::new(),
            pool: Pool::new(),
            counters,
            next_ageing: now + Duration::from_secs(1),
        }
    }

    /// Applies a reloaded config in place: `ageing`, and each port's capacity, buffer and
    /// delay. The ports (their names and order) and the mode cannot change in place: the
    /// error names the key that needs a restart, and nothing changes.
    pub fn reconfigure(&mut self, cfg: SwitchConfig) -> Result<(), String> {
        if cfg.mode != self.cfg.mode {
            return Err("switch.mode: changes only with a restart".into());
        }
        let names = |c: &SwitchConfig| c.ports.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        if names(&cfg) != names(&self.cfg) {
            return Err(
                "port: the ports (their names and order) change only with a restart".into(),
            );
        }
        let inputs = cfg.ports.len();
        for (o, p) in self.out.iter_mut().zip(&cfg.ports) {
            o.reshape(p, inputs, cfg.mode);
        }
        self.cfg = cfg;
        Ok(())
    }

    /// Learned addresses: (MAC, port index, seconds since last seen).
    pub fn macs(&self, now: Instant) -> Vec<(MacAddr, u16, f64)> {
        let mut v: Vec<_> = self
            .macs
            .iter()
            .map(|(m, (p, t))| (*m, *p, now.duration_since(*t).as_secs_f64()))
            .collect();
        v.sort_by_key(|x| (x.1, x.0));
        v
    }

    /// Takes addresses a predecessor learned (its fast path's table, handed over across
    /// a restart) as learned `now`: unicast MACs on ports this switch has, up to the
    /// table's limit. They age as any learned address does. Returns how many it took.
    pub fn adopt(&mut self, learned: &[(MacAddr, u16)], now: Instant) -> usize {
        let mut n = 0;
        for &(mac, port) in learned {
            if mac.0[0] & 1 == 1 || usize::from(port) >= self.out.len() {
                continue;
            }
            if self.macs.len() >= MAX_MACS && !self.macs.contains_key(&mac) {
                break;
            }
            self.macs.insert(mac, (port, now));
            n += 1;
        }
        n
    }

    /// Frames queued per output port (all its input queues).
    pub fn queued(&self) -> Vec<usize> {
        self.out.iter().map(|o| o.queued_frames()).collect()
    }

    pub fn process(&mut self, p: Pkt, now: Instant, _tx: &mut TxQueues) {
        let input = p.meta.rx_port;
        self.counters.count_rx(input, p.data.len());
        if p.data.len() < 14 {
            self.counters.count(Drop::EthTruncated);
            return self.pool.put(p);
        }
        let dst = MacAddr::from_slice(&p.data[0..6]);
        let src = MacAddr::from_slice(&p.data[6..12]);
        if src.0[0] & 1 == 1 {
            self.counters.count(Drop::SwitchBadSource);
            return self.pool.put(p);
        }
        let full = self.macs.len() >= MAX_MACS;
        match self.macs.get_mut(&src) {
            Some(e) => {
                if e.0 != input {
                    self.counters.event(Event::SwitchMoved);
                }
                *e = (input, now);
            }
            None if !full => {
                self.macs.insert(src, (input, now));
                self.counters.event(Event::SwitchLearned);
            }
            None => self.counters.event(Event::SwitchTableFull),
        }
        let mut p = p;
        // An IPv4 frame whose sender left the TCP/UDP checksum to offload (a veth or a
        // TAP does) gets it filled in: past this switch nobody knows it is missing.
        if p.data[12..14] == [0x08, 0x00] && crate::buf::complete_offloaded_checksum(&mut p) {
            self.counters.event(Event::ChecksumFilled);
        }
        let known = if dst.0[0] & 1 == 0 {
            self.macs.get(&dst).map(|e| e.0)
        } else {
            None
        };
        match known {
            Some(o) if o == input => {
                self.counters.count(Drop::SwitchSamePort);
                self.pool.put(p);
            }
            Some(o) => self.enqueue(o as usize, p, input as usize),
            None => {
                self.counters.event(Event::SwitchFlooded);
                // A copy for every other port but the last, which takes the frame.
                let input = input as usize;
                let Some(last) = (0..self.out.len()).rev().find(|&o| o != input) else {
                    return self.pool.put(p);
                };
                for o in (0..last).filter(|&o| o != input) {
                    let mut c = self.pool.get();
                    c.data.extend_from_slice(&p.data);
                    c.meta = p.meta;
                    self.enqueue(o, c, input);
                }
                self.enqueue(last, p, input);
            }
        }
    }

    fn enqueue(&mut self, o: usize, p: Pkt, input: usize) {
        match self.out[o].enqueue(p, input) {
            Ok(()) => {}
            Err(p) => {
                self.counters.count(Drop::SwitchBufferFull);
                self.pool.put(p);
            }
        }
    }

    /// Sends what every output port's schedule allows by now, and ages the table.
    pub fn poll(&mut self, now: Instant, tx: &mut TxQueues) {
        for (i, o) in self.out.iter_mut().enumerate() {
            o.dequeue(now, &mut self.sent);
            for p in self.sent.drain(..) {
                tx.push(i as u16, p);
            }
        }
        if now >= self.next_ageing {
            self.next_ageing = now + Duration::from_secs(1);
            let ageing = self.cfg.ageing;
            self.macs
                .retain(|_, (_, t)| now.duration_since(*t) < ageing);
        }
    }

    /// Frames wait in a queue or a delay line: the run loop must not sleep.
    pub fn busy(&self) -> bool {
        self.out.iter().any(|o| o.queued())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Scope;

    fn mac(n: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, n])
    }

    fn frame(src: u8, dst: MacAddr, len: usize, port: u16) -> Pkt {
        let mut p = Pkt::new();
        p.data.extend_from_slice(&dst.0);
        p.data.extend_from_slice(&mac(src).0);
        p.data.extend_from_slice(&[0x08, 0x00]);
        p.data.resize(len, 0);
        p.meta.rx_port = port;
        p
    }

    fn switch(mode: Mode, capacity_bps: Option<u64>, now: Instant) -> Switch {
        let port = |n: &str| PortConfig {
            name: n.into(),
            capacity_bps,
            buffer_bytes: 64_000,
            delay: Duration::ZERO,
        };
        let cfg = SwitchConfig {
            ports: vec![port("p0"), port("p1"), port("p2")],
            mode,
            ageing: Duration::from_secs(300),
        };
        let names = cfg.ports.iter().map(|p| p.name.clone()).collect();
        Switch::new(cfg, Arc::new(Counters::for_role(names, Scope::Switch)), now)
    }

    /// What a predecessor learned, adopted across a restart: frames to it go to its port
    /// alone; a group address and a port the switch lacks are not taken.
    #[test]
    fn adopted_addresses_are_known_at_once() {
        let now = Instant::now();
        let mut s = switch(Mode::Fair, None, now);
        let mut group = mac(7);
        group.0[0] |= 1;
        assert_eq!(s.adopt(&[(mac(2), 2), (group, 1), (mac(3), 9)], now), 1);
        let mut tx = TxQueues::new(3);
        s.process(frame(1, mac(2), 60, 0), now, &mut tx);
        s.poll(now, &mut tx);
        let out: Vec<u16> = tx.drain_all().into_iter().map(|(p, _)| p).collect();
        assert_eq!(out, vec![2]);
        assert_eq!(s.macs(now).len(), 2, "mac(2) adopted, the source learned");
    }

    #[test]
    fn learns_floods_and_filters() {
        let now = Instant::now();
        let mut s = switch(Mode::Fair, None, now);
        let mut tx = TxQueues::new(3);
        // Unknown destination: flooded to the two other ports.
        s.process(frame(1, mac(2), 60, 0), now, &mut tx);
        s.poll(now, &mut tx);
        let out: Vec<u16> = tx.drain_all().into_iter().map(|(p, _)| p).collect();
        assert_eq!(out, vec![1, 2]);
        // The answer goes only where its destination was learned.
        s.process(frame(2, mac(1), 60, 2), now, &mut tx);
        s.poll(now, &mut tx);
        let out: Vec<u16> = tx.drain_all().into_iter().map(|(p, _)| p).collect();
        assert_eq!(out, vec![0]);
        // To a MAC on the port it came in by: filtered. A group source: dropped.
        s.process(frame(3, mac(1), 60, 0), now, &mut tx);
        let mut bad = frame(4, mac(1), 60, 1);
        bad.data[6] = 0x01;
        s.process(bad, now, &mut tx);
        s.process(frame(5, mac(1), 10, 1), now, &mut tx);
        s.poll(now, &mut tx);
        assert!(tx.drain_all().is_empty());
        let c = &s.counters;
        assert_eq!(c.drops(Drop::SwitchSamePort), 1);
        assert_eq!(c.drops(Drop::SwitchBadSource), 1);
        assert_eq!(c.drops(Drop::EthTruncated), 1);
        assert_eq!(c.events(Event::SwitchLearned), 3);
        assert_eq!(c.events(Event::SwitchFlooded), 1);
        assert_eq!(s.macs(now).len(), 3);
    }

    /// Two inputs into one 10 Mbit/s port: A offers 20 Mbit/s, B about 3.4. Fair mode gives
    /// B all it offers (its demand is under the fair share) and A the rest; FIFO shares the
    /// port in proportion to what arrives, so B gets well under half of what it offers.
    fn shares(mode: Mode) -> (f64, f64, f64) {
        let t0 = Instant::now();
        let mut s = switch(mode, Some(10_000_000), t0);
        let mut tx = TxQueues::new(3);
        // The sink behind port 2 says hello first, so its MAC is known.
        s.process(frame(9, mac(1), 60, 2), t0, &mut tx);
        s.poll(t0, &mut tx);
        tx.drain_all();
        let (mut a, mut b) = (0usize, 0usize);
        let mut offered_b = 0usize;
        let step = Duration::from_micros(100);
        let mut now = t0;
        // Arrivals at random ticks (a fixed LCG), in random order within a tick, so that
        // neither input always comes first.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) as u32
        };
        for i in 0..20_000u32 {
            now += step;
            // A: a 1000-byte frame every 0.4 ms on average; B: every 2.4 ms.
            let a_now = rand() % 4 == 0;
            let b_now = rand() % 24 == 0;
            let b_first = rand() % 2 == 0;
            for who in [b_first, !b_first] {
                if who && b_now {
                    s.process(frame(2, mac(9), 1000, 1), now, &mut tx);
                    offered_b += 1;
                } else if !who && a_now {
                    s.process(frame(1, mac(9), 1000, 0), now, &mut tx);
                }
            }
            s.poll(now, &mut tx);
            for (port, p) in tx.drain_all() {
                assert_eq!(port, 2);
                // Count after the first half second (the queues have filled).
                if i >= 5_000 {
                    if p.data[11] == 1 {
                        a += 1
                    } else {
                        b += 1
                    }
                }
            }
        }
        let secs = 1.5;
        let mbps = |n: usize| (n * 1024 * 8) as f64 / secs / 1e6;
        let offered_b_mbps = (offered_b * 1024 * 8) as f64 / 2.0 / 1e6;
        (mbps(a), mbps(b), offered_b_mbps)
    }

    #[test]
    fn fair_mode_serves_the_small_input_in_full_fifo_does_not() {
        let (a, b, offered) = shares(Mode::Fair);
        eprintln!("fair: A {a:.2} B {b:.2} of {offered:.2} Mbit/s");
        // The port is full: the two together use its capacity.
        assert!((a + b - 10.0).abs() < 0.5, "fair: {a} + {b}");
        assert!(b >= 0.95 * offered, "fair: B got {b} of {offered} Mbit/s");
        let (a, b, _) = shares(Mode::Fifo);
        eprintln!("fifo: A {a:.2} B {b:.2} of {offered:.2} Mbit/s");
        assert!((a + b - 10.0).abs() < 0.5, "fifo: {a} + {b}");
        assert!(b < 0.6 * offered, "fifo: B got {b} of {offered} Mbit/s");
    }

    #[test]
    fn delay_holds_frames() {
        let t0 = Instant::now();
        let mut s = switch(Mode::Fifo, None, t0);
        s.out[2].delay = Duration::from_millis(50);
        let mut tx = TxQueues::new(3);
        s.process(frame(9, mac(1), 60, 2), t0, &mut tx);
        s.process(frame(1, mac(9), 60, 0), t0, &mut tx);
        s.poll(t0, &mut tx);
        assert_eq!(
            tx.drain_all().len(),
            2,
            "the flood of the first frame, port 0 and 1"
        );
        s.poll(t0 + Duration::from_millis(49), &mut tx);
        assert!(tx.drain_all().is_empty() && s.busy());
        s.poll(t0 + Duration::from_millis(50), &mut tx);
        assert_eq!(tx.drain_all().len(), 1);
        assert!(!s.busy());
    }

    /// A reload reshapes a port in place: at 1 Mbit/s a second 1000-byte frame waits 8 ms
    /// behind the first; unshaped, it leaves at once. The mode and the ports refuse.
    #[test]
    fn a_reload_reshapes_ports_in_place_and_refuses_what_needs_a_restart() {
        let t0 = Instant::now();
        let mut s = switch(Mode::Fifo, Some(1_000_000), t0);
        let mut tx = TxQueues::new(3);
        s.process(frame(9, mac(1), 60, 2), t0, &mut tx);
        s.poll(t0, &mut tx);
        tx.drain_all();
        let two = |s: &mut Switch, tx: &mut TxQueues, at: Instant| {
            s.process(frame(1, mac(9), 1000, 0), at, tx);
            s.process(frame(1, mac(9), 1000, 0), at, tx);
            s.poll(at, tx);
            tx.drain_all().len()
        };
        assert_eq!(two(&mut s, &mut tx, t0), 1);
        let mut cfg = s.cfg.clone();
        for p in &mut cfg.ports {
            p.capacity_bps = None;
        }
        s.reconfigure(cfg.clone()).unwrap();
        // The frame that waited leaves now, with the two new ones.
        let t1 = t0 + Duration::from_millis(1);
        assert_eq!(two(&mut s, &mut tx, t1), 3);
        let mut fair = cfg.clone();
        fair.mode = Mode::Fair;
        assert!(s.reconfigure(fair).unwrap_err().contains("switch.mode"));
        let mut renamed = cfg.clone();
        renamed.ports[1].name = "p9".into();
        assert!(s.reconfigure(renamed).unwrap_err().starts_with("port:"));
        assert_eq!(s.cfg, cfg);
    }
}
