//! The forwarder's filters: access lists in and out, reject, strict and loose
//! reverse-path checks, counted per rule and per interface.

use super::*;
use crate::acl::{Acl, Action, Binding, FilterShare, Filters, Net, Rule, Urpf};

fn deny_udp_to(dst: &str, action: Action) -> Acl {
    let mut r = Rule::any(action);
    r.protocol = Some(17);
    r.dst = Some(Net::parse(dst).unwrap());
    Acl {
        name: "edge".into(),
        default: Action::Permit,
        rules: vec![r],
    }
}

fn filter(f: &mut Forwarder, acls: Vec<Acl>, bindings: Vec<Binding>) -> FilterShare {
    let names = f.ifaces.iter().map(|i| i.name.clone()).collect();
    let share = FilterShare::new(Filters::new(acls, bindings, names, None));
    f.set_filters(share.clone());
    share
}

#[test]
fn acl_in_denies_rejects_and_counts_per_rule() {
    let (mut f, now) = router();
    let b = Binding {
        acl_in: Some(0),
        ..Default::default()
    };
    let share = filter(
        &mut f,
        vec![deny_udp_to("10.2.0.20/32", Action::Deny)],
        vec![b, Binding::default()],
    );
    let out = run(&mut f, now, 0, udp_frame(Udp::default()));
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(f.counters.drops(Drop::AclDeny), 1);
    let fl = share.load();
    assert_eq!(fl.lists[0].counts[0].get().0, 1);
    assert_eq!(fl.drops[0].acl_in.get().0, 1);
    // Another destination: permitted by the default, counted there, forwarded.
    let out = run(
        &mut f,
        now,
        0,
        udp_frame(Udp {
            dst: "10.3.0.7",
            ..Default::default()
        }),
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 1);
    assert_eq!(fl.lists[0].counts[1].get().0, 1);
    // Reject: administratively prohibited back to the sender, out of port 0.
    f.end_batch();
    filter(
        &mut f,
        vec![deny_udp_to("10.2.0.20/32", Action::Reject)],
        vec![b, Binding::default()],
    );
    let out = run(&mut f, now, 0, udp_frame(Udp::default()));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, 0);
    let (t, c, src, dst) = icmp_of(&out[0].1);
    assert_eq!((t, c), (3, 13));
    assert_eq!((src, dst), (ip("10.1.0.1"), ip("10.1.0.10")));
    assert_eq!(f.counters.drops(Drop::AclReject), 1);
}

#[test]
fn acl_out_applies_to_what_leaves_by_the_interface() {
    let (mut f, now) = router();
    let b = Binding {
        acl_out: Some(0),
        ..Default::default()
    };
    let share = filter(
        &mut f,
        vec![deny_udp_to("10.2.0.0/24", Action::Deny)],
        vec![Binding::default(), b],
    );
    assert!(run(&mut f, now, 0, udp_frame(Udp::default())).is_empty());
    assert_eq!(f.counters.drops(Drop::AclDeny), 1);
    assert_eq!(share.load().drops[1].acl_out.get().0, 1);
    // In by port 1, out by port 0: not filtered.
    let back = udp_frame(Udp {
        dst_mac: R1,
        src: "10.2.0.20",
        dst: "10.1.0.10",
        ..Default::default()
    });
    assert_eq!(run(&mut f, now, 1, back).len(), 1);
}

#[test]
fn strict_and_loose_reverse_path_checks() {
    let (mut f, now) = router();
    // 10.3.0.0/16 is behind port 1: from there on port 0 fails strict, passes loose.
    let spoofed = || {
        udp_frame(Udp {
            src: "10.3.0.9",
            ..Default::default()
        })
    };
    let strict = Binding {
        urpf: Urpf::Strict,
        ..Default::default()
    };
    let share = filter(&mut f, vec![], vec![strict, Binding::default()]);
    assert!(run(&mut f, now, 0, spoofed()).is_empty());
    assert_eq!(f.counters.drops(Drop::UrpfStrict), 1);
    assert_eq!(share.load().drops[0].urpf.get().0, 1);
    // A legitimate source passes.
    assert_eq!(run(&mut f, now, 0, udp_frame(Udp::default())).len(), 1);
    f.end_batch();
    let loose = Binding {
        urpf: Urpf::Loose,
        ..Default::default()
    };
    filter(&mut f, vec![], vec![loose, Binding::default()]);
    assert_eq!(run(&mut f, now, 0, spoofed()).len(), 1);
    // No route at all: loose drops.
    let unrouted = udp_frame(Udp {
        src: "192.0.2.9",
        ..Default::default()
    });
    assert!(run(&mut f, now, 0, unrouted.clone()).is_empty());
    assert_eq!(f.counters.drops(Drop::UrpfLoose), 1);
    // A default route: no route for loose unless urpf_allow_default, and a default
    // through the same gateway as 10.3.0.0/16 keeps that route a real one.
    f.add_route(Prefix::parse_strict("0.0.0.0/0").unwrap(), ip("10.2.0.2"))
        .unwrap();
    f.end_batch();
    assert!(run(&mut f, now, 0, unrouted.clone()).is_empty());
    assert_eq!(f.counters.drops(Drop::UrpfLoose), 2);
    assert_eq!(run(&mut f, now, 0, spoofed()).len(), 1);
    f.end_batch();
    let allow = Binding {
        urpf_allow_default: true,
        ..loose
    };
    filter(&mut f, vec![], vec![allow, Binding::default()]);
    assert_eq!(run(&mut f, now, 0, unrouted).len(), 1);
}
