use super::*;

#[test]
fn a_points_drops_are_named_most_first() {
    assert_eq!(where_dropped(&json!({})), "");
    let d = json!({"h1:eth0": 3, "ic:ic-r1": 40, "lb1:eth1": 3});
    assert_eq!(
        where_dropped(&d),
        " (at ic:ic-r1 40, h1:eth0 3, lb1:eth1 3)"
    );
}

#[test]
fn traffic_goes_from_every_network_to_another() {
    assert_eq!(streams(1), vec![(1, 2)]);
    assert_eq!(streams(2), vec![(1, 2), (2, 1)]);
    assert_eq!(streams(3), vec![(1, 2), (2, 3), (3, 1)]);
    assert_eq!(networks(1), 2);
}

#[test]
fn the_model_takes_the_element_that_runs_out_first() {
    let e = |n: &str, c: f64, s: f64| json!({"element": n, "frames_per_cpu_s": c, "share": s});
    // An LB that takes every frame at 2 M/s per CPU-second, two back-ends at 1 M/s
    // taking half each: the back-ends allow 2 M/s, the LB 2 M/s, the generators 3.
    let (p, who) = predict(
        &[e("lb1", 2e6, 1.0), e("r1", 1e6, 0.5), e("r2", 1e6, 0.5)],
        3e6,
    );
    assert_eq!((p, who.as_str()), (2e6, "lb1"));
    let (p, who) = predict(
        &[e("lb1", 4e6, 1.0), e("r1", 1e6, 0.6), e("r2", 1e6, 0.4)],
        3e6,
    );
    assert!((p - 1e6 / 0.6).abs() < 1.0 && who == "r1", "{p} {who}");
    // Generators below everything: they are the limit. Unmeasured elements count not.
    let (p, who) = predict(&[e("lb1", 4e6, 1.0), e("r1", 0.0, 0.0)], 1e6);
    assert_eq!((p, who.as_str()), (1e6, "generators"));
    // An LB of two cores passes twice what it passes per CPU-second.
    let mut lb = e("lb1", 2e6, 1.0);
    lb["cores"] = json!(2);
    let (p, who) = predict(&[lb, e("r1", 3e6, 0.5), e("r2", 3e6, 0.5)], 9e6);
    assert_eq!((p, who.as_str()), (4e6, "lb1"));
}

#[test]
fn labs_are_written_for_every_contender() {
    let dir = std::env::temp_dir().join(format!("tessera-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("table-10.txt"), "192.0.2.0/24\n").unwrap();
    let t = TableFile {
        key: "10".into(),
        spread: false,
    };
    let s = multistage(&dir, (2, 3, 1), &t, "t", Interconnect::Bridge).unwrap();
    let l = lab::Lab::load(&s.lab, Some("t"), "tessera".into()).unwrap();
    assert_eq!(l.topo.element.len(), 5);
    assert_eq!(l.topo.switch.len(), 1);
    // With our switch: one more element, a port for each of the five.
    let sw = multistage(&dir, (2, 3, 1), &t, "w", Interconnect::Switch).unwrap();
    let l = lab::Lab::load(&sw.lab, Some("w"), "tessera".into()).unwrap();
    assert_eq!((l.topo.element.len(), l.topo.switch.len()), (6, 0));
    assert_eq!(sw.cores, 5);
    let ic = control::switch::SwitchFile::load(&dir.join("w-ic.toml")).unwrap();
    assert_eq!(ic.cfg.ports.len(), 5);
    assert!(ic.io.fast_path);
    assert_eq!(l.topo.host.len(), 2);
    assert_eq!(s.cores, 5);
    let lb = control::balancer::BalancerFile::load(&dir.join("t-lb1.toml")).unwrap();
    assert_eq!(lb.interfaces.len(), 2);
    // LBs of two cores: the router's cores count them.
    let two = multistage(&dir, (2, 3, 2), &t, "two", Interconnect::Switch).unwrap();
    assert_eq!(two.cores, 7);
    let r = control::ForwarderFile::load(&dir.join("t-r3.toml")).unwrap();
    assert_eq!(r.interfaces.len(), 3);
    let s = single(&dir, 2, 1, false, &t, "f").unwrap();
    assert_eq!(s.contender, "forwarder");
    let r = control::ForwarderFile::load(&dir.join("f-r.toml")).unwrap();
    assert!(r.io.fast_path);
    let s = single(&dir, 2, 3, true, &t, "k").unwrap();
    assert_eq!((s.contender, s.cores), ("kernel", 3));
    lab::Lab::load(&s.lab, Some("k"), "tessera".into()).unwrap();
    // The star of three members over our switch: every member a forwarder with the same
    // member list, the routes with their own next hops when spread.
    std::fs::write(dir.join("table-10-spread.txt"), "192.0.2.0/24 10.2.0.10\n").unwrap();
    let spread = TableFile {
        key: "10-spread".into(),
        spread: true,
    };
    let s = star(&dir, 3, &spread, "s").unwrap();
    assert_eq!((s.contender, s.cores), ("star", 3));
    let l = lab::Lab::load(&s.lab, Some("s"), "tessera".into()).unwrap();
    assert_eq!((l.topo.element.len(), l.topo.host.len()), (4, 3));
    for i in 1..=3 {
        let m = control::ForwarderFile::load(&dir.join(format!("s-s{i}.toml"))).unwrap();
        let star = m.star.expect("a star member");
        // Every member's network, this one's included (skipped when it runs).
        assert_eq!(star.members.len(), 3, "{star:?}");
        assert_eq!(m.interfaces[star.internal].name, format!("s{i}-int"));
        assert!(m.routes_file_via.is_empty());
    }
    let ic = control::switch::SwitchFile::load(&dir.join("s-ic.toml")).unwrap();
    assert_eq!(ic.cfg.ports.len(), 3);
    std::fs::remove_dir_all(&dir).unwrap();
}
