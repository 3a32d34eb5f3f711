//! `tessera bench pipeline`: the forwarder's whole per-packet path over in-memory frames,
//! no system calls: copy into a buffer (what a port does), Ethernet and IPv4 validation,
//! LPM, TTL and incremental checksum, MAC rewrite, counters, and the transmit queue.
//!
//! Frames are 64 bytes on the wire (60 without the FCS, which software never sees): UDP
//! with 18 bytes of payload. Tables: synthetic with a real prefix-length mix at 10, 1,000,
//! 10,000 and 167,000 prefixes, and the full real table when one is given. Flows: `one`
//! (one destination), `two`, `many` (65,536 destinations drawn from the table's prefixes).
//! One thread, so rates are packets per second per core.

use crate::table::Table;
use crate::Rng;
use dataplane::element::process_batch;
use dataplane::forwarder::{Forwarder, ForwarderConfig, Iface};
use dataplane::{Event, TxQueues};
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use wire::MacAddr;

const IN_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const BATCH: usize = 256;
pub const FRAME_LEN: usize = 60;

pub(crate) fn frame(dst: Ipv4Addr, sport: u16) -> Vec<u8> {
    let payload = [0u8; FRAME_LEN - 14 - 28];
    wire::frame::UdpFrame {
        eth_dst: IN_MAC,
        src: Ipv4Addr::new(10, 1, 0, 10),
        dst,
        src_port: sport,
        payload: &payload,
        ..Default::default()
    }
    .to_vec()
}

/// Packets per second of the forwarder over `table` for `frames`, measured for `time`.
pub(crate) fn measure(table: &Table, frames: &[Vec<u8>], time: Duration) -> (f64, u64) {
    let now = Instant::now();
    let ifaces = vec![
        Iface::new("in", IN_MAC, [10, 1, 0, 1].into(), 24),
        Iface::new("out", MacAddr([2, 0, 0, 0, 0, 2]), [10, 2, 0, 1].into(), 24),
    ];
    let mut f = Forwarder::new(ifaces, ForwarderConfig::default(), now);
    let gw = Ipv4Addr::new(10, 2, 0, 2);
    f.replace_routes(table.routes.iter().map(|r| (r.0, vec![gw])).collect())
        .unwrap();
    f.neighbours
        .learn(1, gw, MacAddr([2, 0, 0, 0, 0xa, 0xa]), now, true);
    let mut tx = TxQueues::new(2);
    let mut sent = 0u64;
    let mut i = 0;
    let mut batch = Vec::with_capacity(BATCH);
    // As the run loop does: a batch is received (copied into buffers), then processed.
    let mut run = |f: &mut Forwarder, tx: &mut TxQueues, i: &mut usize, n: usize| {
        for _ in 0..n {
            for _ in 0..BATCH {
                let mut p = f.pool.get();
                p.data.extend_from_slice(&frames[*i]);
                *i = if *i + 1 == frames.len() { 0 } else { *i + 1 };
                batch.push(p);
            }
            process_batch(f, &mut batch, 0, now, tx);
            for q in tx.queues.iter_mut() {
                for p in q.drain(..) {
                    f.pool.put(p);
                }
            }
            f.end_batch();
        }
    };
    run(&mut f, &mut tx, &mut i, 200); // warm-up
    let before = f.counters.events(Event::Forwarded);
    let t = Instant::now();
    while t.elapsed() < time {
        run(&mut f, &mut tx, &mut i, 64);
        sent += (64 * BATCH) as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    let forwarded = f.counters.events(Event::Forwarded) - before;
    (sent as f64 / secs, sent - forwarded)
}

/// Runs the matrix. `full` is the real table, if given, with its name.
pub fn run(full: Option<(&Table, &str)>, time: Duration, progress: &mut dyn FnMut(&str)) -> Value {
    let mut tables: Vec<(String, Table)> = [10usize, 1_000, 10_000, 167_000]
        .iter()
        .map(|&n| (n.to_string(), crate::table::synthetic(n, n as u64)))
        .collect();
    if let Some((t, name)) = full {
        tables.push((format!("{} ({name})", t.routes.len()), t.clone()));
    }
    let mut rows = Vec::new();
    for (name, t) in &tables {
        let mut rng = Rng::new(7);
        let mut addr = || {
            let p = t.routes[rng.below(t.routes.len())].0;
            Ipv4Addr::from(p.bits() | (rng.next_u64() as u32 & !fib::mask(p.len())))
        };
        let one = vec![frame(addr(), 1)];
        let two = vec![frame(addr(), 1), frame(addr(), 2)];
        let many: Vec<Vec<u8>> = (0..65_536).map(|i| frame(addr(), i as u16)).collect();
        for (flows, frames) in [("one", one), ("two", two), ("many", many)] {
            progress(&format!("table {name}, {flows} flow(s)"));
            let (pps, lost) = measure(t, &frames, time);
            rows.push(json!({"table_prefixes": t.routes.len(), "table": name, "flows": flows, "frame_bytes": FRAME_LEN + 4, "pps_per_core": pps.round(), "not_forwarded": lost}));
        }
    }
    json!({"bench": "pipeline", "seconds_per_point": time.as_secs_f64(), "results": rows})
}

/// The results as a text table: one row per table size, one column per flow count (Mpps).
pub fn text_table(v: &Value) -> String {
    let mut s = format!(
        "{:<28} {:>10} {:>10} {:>10}\n",
        "table (prefixes)", "one Mpps", "two Mpps", "many Mpps"
    );
    let rows = v["results"].as_array().cloned().unwrap_or_default();
    for chunk in rows.chunks(3) {
        s.push_str(&format!("{:<28}", chunk[0]["table"].as_str().unwrap_or("")));
        for r in chunk {
            s.push_str(&format!(
                " {:>10.2}",
                r["pps_per_core"].as_f64().unwrap_or(0.0) / 1e6
            ));
        }
        s.push('\n');
    }
    s
}
