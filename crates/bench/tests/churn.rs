//! Forwarding while the full table is reloaded and routes churn, on two threads: no packet
//! whose route exists before and after a change is lost or misrouted.
//!
//! The table is ../shared/data/ipv4-bgp-2023.txt.gz when present (901,899 prefixes), else a
//! seeded synthetic table of the same size and length mix (said on stderr).

use bench::table::{self, Table};
use dataplane::forwarder::{Forwarder, ForwarderConfig, Iface};
use dataplane::{Drop, Pkt, TxQueues};
use fib::Prefix;
use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use wire::MacAddr;

fn full_table() -> Table {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/ipv4-bgp-2023.txt.gz"
    );
    match table::read(std::path::Path::new(path)) {
        Ok((t, _)) => t,
        Err(e) => {
            eprintln!(
                "REAL TABLE ABSENT ({e}): using a synthetic table of 901,899 prefixes instead"
            );
            table::synthetic(901_899, 3)
        }
    }
}

const IN: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);

fn frame(dst: Ipv4Addr) -> Vec<u8> {
    wire::frame::UdpFrame {
        eth_dst: IN,
        src: Ipv4Addr::new(10, 1, 0, 10),
        dst,
        src_port: 1,
        ..Default::default()
    }
    .to_vec()
}

#[test]
fn no_loss_while_reloading_and_churning() {
    let t = full_table();
    let gw_a = Ipv4Addr::new(10, 2, 0, 2);
    let gw_b = Ipv4Addr::new(10, 3, 0, 2);
    // Stable prefixes: those with no more-specific prefix in the table, so that churn
    // elsewhere cannot change their longest match. Every 97th of them, up to 5,000.
    let mut sorted: Vec<Prefix> = t.routes.iter().map(|r| r.0).collect();
    sorted.sort_by_key(|p| (p.bits(), p.len()));
    let leafy: Vec<Prefix> = sorted
        .iter()
        .enumerate()
        .filter(|(i, p)| sorted.get(i + 1).is_none_or(|q| !p.contains(q.addr())))
        .map(|(_, p)| *p)
        .collect();
    let stable: Vec<Prefix> = leafy.iter().step_by(97).take(5000).copied().collect();
    let stable_set: HashSet<Prefix> = stable.iter().copied().collect();
    // Churned prefixes: others, flipped between gateway B and withdrawn.
    let churn: Vec<Prefix> = sorted
        .iter()
        .filter(|p| !stable_set.contains(p))
        .step_by(53)
        .take(20_000)
        .copied()
        .collect();
    let full: Vec<(Prefix, Vec<Ipv4Addr>)> = sorted.iter().map(|p| (*p, vec![gw_a])).collect();

    let now = Instant::now();
    let ifaces = vec![
        Iface::new("in", IN, [10, 1, 0, 1].into(), 24),
        Iface::new("a", MacAddr([2, 0, 0, 0, 0, 2]), [10, 2, 0, 1].into(), 24),
        Iface::new("b", MacAddr([2, 0, 0, 0, 0, 3]), [10, 3, 0, 1].into(), 24),
    ];
    let mut f = Forwarder::new(ifaces, ForwarderConfig::default(), now);
    f.replace_routes(full.clone()).unwrap();
    f.neighbours
        .learn(1, gw_a, MacAddr([2, 0, 0, 0, 0xa, 0xa]), now, true);
    f.neighbours
        .learn(2, gw_b, MacAddr([2, 0, 0, 0, 0xb, 0xb]), now, true);
    let mut routes = f.take_routes().unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let writer = std::thread::spawn(move || {
        let mut stats = (0, 0);
        for round in 0..3 {
            routes.replace(full.clone()).unwrap();
            stats.0 += 1;
            for (i, chunk) in churn.chunks(100).enumerate() {
                let add = (i + round) % 2 == 0;
                let changes = chunk.iter().map(|p| (*p, add.then(|| vec![gw_b])));
                stats.1 += routes.apply(changes).unwrap();
                // One at a time too, not only in batches.
                if let Some(p) = chunk.first() {
                    routes.remove(*p);
                    routes.add(*p, &[gw_b]).unwrap();
                    stats.1 += 2;
                }
            }
        }
        d.store(true, Ordering::SeqCst);
        stats
    });

    let frames: Vec<Vec<u8>> = stable
        .iter()
        .enumerate()
        .map(|(i, p)| {
            frame(Ipv4Addr::from(
                p.bits() | (i as u32).wrapping_mul(2654435761) & !fib::mask(p.len()),
            ))
        })
        .collect();
    let mut tx = TxQueues::new(3);
    let (mut sent, mut out_a, mut wrong) = (0u64, 0u64, 0u64);
    // Publications seen by the worker: changes of snapshot between batches (double
    // buffering reuses two allocations, so addresses repeat; changes do not lie).
    let (mut last, mut switches) = (0usize, 0u64);
    let mut i = 0;
    while !done.load(Ordering::SeqCst) {
        for _ in 0..64 {
            let mut p = Pkt::from_bytes(&frames[i % frames.len()]);
            p.meta.rx_port = 0;
            f.process(p, now, &mut tx);
            sent += 1;
            i += 1;
        }
        let id = f.snapshot_id();
        if id != last {
            switches += 1;
            last = id;
        }
        for (port, p) in tx.drain_all() {
            if port == 1 {
                out_a += 1;
            } else {
                wrong += 1;
            }
            f.pool.put(p);
        }
        f.end_batch();
    }
    let (reloads, changes) = writer.join().unwrap();
    let dropped: u64 = Drop::ALL.iter().map(|d| f.counters.drops(*d)).sum();
    eprintln!("{sent} packets forwarded during {reloads} full reloads and {changes} route changes; the worker saw {switches} snapshot switches");
    assert_eq!(wrong, 0, "misrouted");
    assert_eq!(dropped, 0, "dropped: {:?}", f.counters.snapshot().drops);
    assert_eq!(out_a, sent, "lost");
    assert!(
        switches > 100,
        "the writer published while the worker forwarded ({switches} snapshot switches seen)"
    );
    assert!(sent > 10_000);
}
