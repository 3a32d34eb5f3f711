//! The fast path samples flows as user space does (docs/flows.md): at 1 in 1, every frame
//! either forwards (or its filters drop: a list, the reverse-path check) gives the same
//! sample through the programs' ring
//! buffer as through the worker's sampler: the key, the interfaces, the next hop, the
//! bytes, the fate.

use super::*;
use dataplane::acl::{Acl, Action, Binding, FilterShare, Filters, Net, Rule};
use dataplane::flows::{Sample, Sampler, SamplerShare};
use std::sync::atomic::Ordering::Relaxed;

#[test]
fn the_xdp_fast_path_samples_as_user_space() {
    agree_on_samples(At::Xdp);
}

#[test]
fn the_tcx_fast_path_samples_as_user_space() {
    agree_on_samples(At::Tc);
}

fn agree_on_samples(at: At) {
    let mut c = Check::new(at);
    // A list on port 0 that denies 8.8.4.4: those frames are sampled as dropped.
    let mut deny = Rule::any(Action::Deny);
    deny.dst = Some(Net::parse("8.8.4.4/32").unwrap());
    let acl = Acl {
        name: "in".into(),
        default: Action::Permit,
        rules: vec![deny],
    };
    let names = c.f.ifaces.iter().map(|i| i.name.clone()).collect();
    let b = Binding {
        acl_in: Some(0),
        urpf: dataplane::acl::Urpf::Strict,
        ..Default::default()
    };
    let f = Filters::new(vec![acl], vec![b, Binding::default()], names, None);
    c.fl.set_filters(&f, None).unwrap();
    c.f.set_filters(FilterShare::new(f));
    let share = Arc::new(SamplerShare::default());
    share.interval.store(1, Relaxed);
    let stats = Arc::new(crate::flows::ExportStats::default());
    let mut fast = crate::fast::flow_samples(Some(&c.fl), share.clone(), stats.clone()).unwrap();
    fast(&mut |_| {}); // writes the interval to the programs
    let (tx, rx) = std::sync::mpsc::sync_channel(64);
    c.f.set_sampler(Some(Sampler::new(share.clone(), tx, 7)));
    // From a source whose route leaves by port 1: fails port 0's strict check.
    let mut spoofed = udp([8, 8, 8, 8], 18);
    spoofed[26..30].copy_from_slice(&[10, 2, 0, 50]);
    fix(&mut spoofed);
    let frames = [
        udp([8, 8, 8, 8], 18),
        udp([192, 0, 2, 7], 300),
        udp([8, 8, 4, 4], 18),
        spoofed,
    ];
    for f in &frames {
        c.frame(0, f);
        c.f.end_batch();
    }
    let mut from_fast: Vec<Sample> = Vec::new();
    fast(&mut |s| from_fast.push(s));
    let from_user: Vec<Sample> = rx.try_iter().collect();
    assert_eq!(from_fast.len(), 4, "{from_fast:#?}");
    assert_eq!(from_fast, from_user);
    assert_eq!(from_fast[2].status, wire::ipfix::status::DROPPED_ACL_DENY);
    assert_eq!(from_fast[3].status, wire::ipfix::status::DROPPED_RPF);
    assert_eq!((from_fast[2].egress, from_fast[0].egress), (None, Some(1)));
    assert_eq!(stats.ring_overruns.load(Relaxed), 0);
    // 1 in 100 (a random number below 2^32 / 100): of 20,000 runs of the program on a
    // forwarded frame, some 200 sampled (the binomial's standard deviation is 14).
    share.interval.store(100, Relaxed);
    fast(&mut |_| {});
    // One run a call: a repeated run rewrites the same buffer (its TTL, its MACs).
    for _ in 0..20_000 {
        c.progs[0].time(&frames[0], 1).unwrap();
    }
    let mut n = 0;
    fast(&mut |s| {
        assert_eq!(s.interval, 100);
        n += 1
    });
    assert!(
        (120..=300).contains(&n),
        "{n} of 20,000 sampled at 1 in 100"
    );
    // Off: nothing more.
    share.interval.store(0, Relaxed);
    fast(&mut |_| {});
    c.frame(0, &frames[0]);
    let mut more = 0;
    fast(&mut |_| more += 1);
    assert_eq!(more, 0);
}

/// A star member samples what it sends across the star's switch where the packet entered
/// the star, in XDP as in user space: out by the internal port, to the next hop the star
/// header names. What another member sends it across the switch (looked up, and sampled,
/// there) it does not sample again, so a flow crossing the star is counted once.
#[test]
fn the_xdp_fast_path_samples_the_stars_crossings_once() {
    let mut c = star_member(At::Xdp, true);
    let share = Arc::new(SamplerShare::default());
    share.interval.store(1, Relaxed);
    let stats = Arc::new(crate::flows::ExportStats::default());
    let mut fast = crate::fast::flow_samples(Some(&c.fl), share.clone(), stats.clone()).unwrap();
    fast(&mut |_| {});
    let (tx, rx) = std::sync::mpsc::sync_channel(64);
    c.f.set_sampler(Some(Sampler::new(share.clone(), tx, 7)));
    let across = [
        udp([10, 3, 0, 10], 18),
        udp([192, 0, 2, 7], 300),
        frame6("2001:db8:1::10", "2001:db8:4:7::1", 64, None, 18),
    ];
    advertise_host6(&mut c, "2001:db8:1::10");
    let to_us = [
        star_frame(0, [10, 1, 0, 10]),
        star_frame6(0, "2001:db8:1::10"),
    ];
    for (port, f) in across
        .iter()
        .map(|f| (0, f))
        .chain(to_us.iter().map(|f| (1, f)))
    {
        let before = c.fast;
        c.frame(port, f);
        assert_eq!(c.fast, before + 1, "the fast path took none of {f:02x?}");
        c.f.end_batch();
    }
    let mut from_fast: Vec<Sample> = Vec::new();
    fast(&mut |s| from_fast.push(s));
    let from_user: Vec<Sample> = rx.try_iter().collect();
    assert_eq!(from_fast.len(), 3, "{from_fast:#?}");
    assert_eq!(from_fast, from_user);
    for s in &from_fast {
        assert_eq!((s.ingress, s.egress), (0, Some(1)), "{s:?}");
    }
}

/// What sampling costs the XDP program per forwarded frame, without the rig's noise
/// (`BPF_PROG_TEST_RUN`, the median of 300 calls of 200 runs): off, 1 in 1,000 and 1 in
/// 100, in seven alternating rounds. Measures, asserts nothing:
/// `cargo test -p control sampling_cost -- --ignored --nocapture` (docs/flows.md).
#[test]
#[ignore]
fn sampling_cost_per_frame() {
    let c = Check::new(At::Xdp);
    let share = Arc::new(SamplerShare::default());
    let stats = Arc::new(crate::flows::ExportStats::default());
    let mut fast = crate::fast::flow_samples(Some(&c.fl), share.clone(), stats.clone()).unwrap();
    // TTL 255: the 200 runs of a call rewrite the same buffer.
    let mut frame = udp([192, 0, 2, 7], 18);
    frame[22] = 255;
    fix(&mut frame);
    assert_eq!(c.progs[0].run(&frame).unwrap().0, Verdict::Forward);
    let median = || {
        let mut ns: Vec<u32> = (0..300)
            .map(|_| c.progs[0].time(&frame, 200).unwrap().1)
            .collect();
        ns.sort_unstable();
        ns[ns.len() / 2]
    };
    let rates = [0u32, 1000, 100];
    let mut rows = vec![Vec::new(); rates.len()];
    for _ in 0..7 {
        for (row, n) in rows.iter_mut().zip(rates) {
            share.interval.store(n, Relaxed);
            fast(&mut |_| {});
            row.push(median());
        }
    }
    fast(&mut |_| {});
    for (row, n) in rows.iter_mut().zip(rates) {
        let runs = row.clone();
        row.sort_unstable();
        println!(
            "cost Xdp sampling 1 in {n} (0: off): {runs:?} ns, median {}",
            row[row.len() / 2]
        );
    }
}
