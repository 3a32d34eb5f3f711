//! The forwarder's filters with real clients (docs/filters.md): nmap through the router
//! against a host with servers on several ports sees `filtered` exactly where an access
//! list denies or rejects (a reject with ICMP administratively prohibited), `open`
//! elsewhere; hping3 with a spoofed source is dropped by the strict and the loose
//! reverse-path checks and counted, while the same probe from a legitimate address passes.
//! On the lab's port backend (TESSERA_TEST_IO: scripts/test runs both), with the fast path.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The single-router lab with r's config given the filters: on r-eth0 (src1) an ingress
/// list and the strict check, on r-eth1 (src2) the loose one.
fn filtered_lab(tag: &str) -> (TestLab, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tessera-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let r = std::fs::read_to_string(repo_path("labs/single-router/r.toml")).unwrap();
    let r = r
        .replace(
            "name = \"r-eth0\"\naddress = \"10.1.0.1/24\"",
            "name = \"r-eth0\"\naddress = \"10.1.0.1/24\"\nacl_in = \"edge-in\"\nurpf = \"strict\"",
        )
        .replace(
            "name = \"r-eth1\"\naddress = \"10.2.0.1/24\"",
            "name = \"r-eth1\"\naddress = \"10.2.0.1/24\"\nurpf = \"loose\"",
        );
    let r = format!(
        "{r}\n{}",
        r#"
[[acl]]
name = "edge-in"
default = "permit"

[[acl.rule]]
action = "deny"
protocol = "tcp"
dst = "10.3.0.10/32"
dst_port = "22"

[[acl.rule]]
action = "reject"
protocol = "tcp"
dst_port = "8080"
"#
    );
    assert!(
        r.contains("acl_in") && r.contains("urpf = \"loose\""),
        "{r}"
    );
    std::fs::write(dir.join("r.toml"), r).unwrap();
    std::fs::copy(
        repo_path("labs/single-router/routes.txt"),
        dir.join("routes.txt"),
    )
    .unwrap();
    let topo = std::fs::read_to_string(repo_path("labs/single-router.toml"))
        .unwrap()
        .replace("single-router/r.toml", "r.toml");
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    (TestLab::up(dir.join("lab.toml"), &[]), dir)
}

/// Listens on `ports` in `node` (accepting and closing), until killed.
fn servers(lab: &TestLab, node: &str, addr: &str, ports: &[u16]) -> std::process::Child {
    let code = format!(
        "import socket, select\nss = []\nfam = socket.AF_INET6 if ':' in '{addr}' else socket.AF_INET\nfor p in {ports:?}:\n    s = socket.socket(fam); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('{addr}', p)); s.listen(64); ss.append(s)\nprint('listening', flush=True)\nwhile True:\n    r, _, _ = select.select(ss, [], [])\n    for s in r:\n        c, _ = s.accept(); c.close()\n"
    );
    let child = lab.spawn(node, &["python3", "-c", &code]);
    let t = Instant::now();
    loop {
        let o = lab.exec(node, &["ss", "-ltn"]);
        let s = String::from_utf8_lossy(&o.stdout).into_owned();
        let shown = if addr.contains(':') {
            format!("[{addr}]")
        } else {
            addr.to_string()
        };
        if ports.iter().all(|p| s.contains(&format!("{shown}:{p} "))) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "servers not listening: {s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// nmap's state and reason of each port of `ports` on `target`, scanned (TCP SYN) from
/// `node`.
fn nmap(lab: &TestLab, node: &str, target: &str, ports: &str) -> Vec<(u16, String, String)> {
    let six = if target.contains(':') { "-6" } else { "-4" };
    let o = lab.exec(
        node,
        &[
            "nmap",
            six,
            "-Pn",
            "-n",
            "-sS",
            "-p",
            ports,
            "--max-retries",
            "1",
            "--max-rtt-timeout",
            "300ms",
            "--initial-rtt-timeout",
            "100ms",
            "-oX",
            "-",
            target,
        ],
    );
    let x = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "nmap: {x}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // <port protocol="tcp" portid="22"><state state="filtered" reason="no-response" ...
    x.split("<port ")
        .skip(1)
        .map(|p| {
            let attr = |k: &str| {
                p.split(&format!("{k}=\""))
                    .nth(1)
                    .and_then(|v| v.split('"').next())
                    .unwrap_or("")
                    .to_string()
            };
            (
                attr("portid").parse().unwrap(),
                attr("state"),
                attr("reason"),
            )
        })
        .collect()
}

/// hping3 from `node`: `count` TCP SYNs to `dst`:80, from `spoof` if given; the replies
/// it received.
fn hping(lab: &TestLab, node: &str, dst: &str, spoof: Option<&str>, count: u32) -> u32 {
    let count = count.to_string();
    let mut argv = vec!["hping3", "-S", "-p", "80", "-c", &count, "-i", "u50000"];
    if let Some(s) = spoof {
        argv.extend(["-a", s]);
    }
    argv.push(dst);
    let o = lab.exec(node, &argv);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // "3 packets transmitted, 3 packets received, 0% packet loss"
    all.split(" packets received")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("hping3: {all}"))
}

fn drops(lab: &TestLab, reason: &str) -> u64 {
    drop_count(&lab.counters("r"), reason)
}

#[test]
fn nmap_and_hping3_meet_the_access_lists_and_reverse_path_checks() {
    let (lab, dir) = filtered_lab("filters");
    let mut srv = servers(&lab, "sink1", "10.3.0.10", &[22, 80, 443, 8080]);
    // nmap: 22 denied (no answer), 8080 rejected (administratively prohibited), the rest
    // open.
    let states = nmap(&lab, "src1", "10.3.0.10", "22,80,443,8080");
    let want = [
        (22, "filtered", "no-response"),
        (80, "open", "syn-ack"),
        (443, "open", "syn-ack"),
        (8080, "filtered", "admin-prohibited"),
    ];
    assert_eq!(
        states
            .iter()
            .map(|(p, s, r)| (*p, s.as_str(), r.as_str()))
            .collect::<Vec<_>>(),
        want,
        "{}",
        lab.show_json("acl", "r")
    );
    // From src2 (no list on r-eth1): all four open.
    let states = nmap(&lab, "src2", "10.3.0.10", "22,80,443,8080");
    assert!(states.iter().all(|s| s.1 == "open"), "{states:?}");
    let acl: Value = lab.show_json("acl", "r");
    let rules = &acl["lists"][0]["rules"];
    assert!(rules[0]["packets"].as_u64().unwrap() >= 1, "{acl}");
    assert!(rules[1]["packets"].as_u64().unwrap() >= 1, "{acl}");
    assert!(
        acl["lists"][0]["default"]["packets"].as_u64().unwrap() >= 2,
        "{acl}"
    );
    assert!(
        drops(&lab, "acl_deny") >= 1 && drops(&lab, "acl_reject") >= 1,
        "{}",
        lab.counters("r")
    );

    // hping3 on r-eth0 (strict): from sink2's network, spoofed, dropped and counted; the
    // same probe from src1's own address answered.
    let before = drops(&lab, "urpf_strict");
    assert_eq!(hping(&lab, "src1", "10.3.0.10", Some("10.4.0.99"), 5), 0);
    assert_eq!(
        drops(&lab, "urpf_strict") - before,
        5,
        "{}",
        lab.counters("r")
    );
    assert_eq!(hping(&lab, "src1", "10.3.0.10", None, 3), 3);
    // On r-eth1 (loose): a source with a route anywhere passes (the router answers nothing
    // for it: the reply goes to sink2's network), one with none is dropped.
    let before = drops(&lab, "urpf_loose");
    hping(&lab, "src2", "10.3.0.10", Some("10.4.0.99"), 3);
    assert_eq!(drops(&lab, "urpf_loose"), before, "{}", lab.counters("r"));
    assert_eq!(hping(&lab, "src2", "10.3.0.10", Some("192.0.2.1"), 4), 0);
    assert_eq!(
        drops(&lab, "urpf_loose") - before,
        4,
        "{}",
        lab.counters("r")
    );
    assert_eq!(hping(&lab, "src2", "10.3.0.10", None, 3), 3);
    let acl: Value = lab.show_json("acl", "r");
    let ifs = acl["interfaces"].as_array().unwrap();
    assert_eq!(ifs[0]["urpf_dropped"], 5, "{acl}");
    assert_eq!(ifs[1]["urpf_dropped"], 4, "{acl}");

    // A reload that adds a rule in front, under a ping stream the lists permit: no ping
    // lost, the kept rules' counts kept, the new rule in force.
    let kept = |acl: &Value| {
        acl["lists"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["match"].as_str().unwrap().contains("8080"))
            .unwrap()["packets"]
            .as_u64()
            .unwrap()
    };
    let acl = lab.show_json("acl", "r");
    let before = kept(&acl);
    let ping = lab.spawn(
        "src1",
        &["ping", "-c", "300", "-i", "0.01", "-W", "1", "10.3.0.10"],
    );
    std::thread::sleep(Duration::from_millis(800));
    let cfg = dir.join("r.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let edited = text.replacen(
        "[[acl.rule]]",
        "[[acl.rule]]\naction = \"deny\"\nprotocol = \"tcp\"\ndst_port = \"443\"\n\n[[acl.rule]]",
        1,
    );
    std::fs::write(&cfg, edited).unwrap();
    let o = lab.tessera(&["reload", "--control", lab.control("r").to_str().unwrap()]);
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success() && said.contains("\"filters_changed\": true"),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = ping.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(" 0% packet loss"), "{text}");
    let acl = lab.show_json("acl", "r");
    assert_eq!(kept(&acl), before, "{acl}");
    assert_eq!(acl["version"], 2, "{acl}");
    let states = nmap(&lab, "src1", "10.3.0.10", "443");
    assert_eq!(states[0].1, "filtered", "{states:?}");
    srv.kill().unwrap();
    srv.wait().unwrap();
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// IPv6 the same (labs/dual-stack.toml): nmap -6 from h1 sees the denied port filtered
/// with no response, the rejected one filtered by an ICMPv6 administratively-prohibited
/// error, the rest open; a ping from an address of h2's network, put on h1, fails the
/// strict check and is counted, while h1's own is answered.
#[test]
fn ipv6_access_lists_and_the_strict_check_meet_real_clients() {
    let dir = std::env::temp_dir().join(format!("tessera-filters6-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let r = std::fs::read_to_string(test_path("labs/dual-stack/r.toml")).unwrap();
    let r = r.replace(
        "name = \"r-eth0\"\naddress = [\"10.1.0.1/24\", \"2001:db8:1::1/64\"]",
        "name = \"r-eth0\"\naddress = [\"10.1.0.1/24\", \"2001:db8:1::1/64\"]\nacl_in = \"v6-in\"\nurpf = \"strict\"",
    );
    assert!(r.contains("v6-in"), "{r}");
    let r = format!(
        "{r}\n{}",
        r#"
[[acl]]
name = "v6-in"

[[acl.rule]]
action = "deny"
protocol = "tcp"
dst = "2001:db8:2::10/128"
dst_port = "22"

[[acl.rule]]
action = "reject"
protocol = "tcp"
dst = "2001:db8:2::/64"
dst_port = "8080"
"#
    );
    std::fs::write(dir.join("r.toml"), r).unwrap();
    std::fs::copy(
        test_path("labs/dual-stack/routes.txt"),
        dir.join("routes.txt"),
    )
    .unwrap();
    let topo = std::fs::read_to_string(test_path("labs/dual-stack.toml"))
        .unwrap()
        .replace("dual-stack/r.toml", "r.toml");
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    let mut srv = servers(&lab, "h2", "2001:db8:2::10", &[22, 80, 8080]);
    let states = nmap(&lab, "h1", "2001:db8:2::10", "22,80,8080");
    let got: Vec<(u16, &str, &str)> = states
        .iter()
        .map(|(p, s, r)| (*p, s.as_str(), r.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (22, "filtered", "no-response"),
            (80, "open", "syn-ack"),
            (8080, "filtered", "admin-prohibited")
        ],
        "{}",
        lab.show_json("acl", "r")
    );
    // h1 sends from an address of h2's network: r-eth0's strict check drops it.
    lab.sh(
        "h1",
        &[
            "ip",
            "-6",
            "addr",
            "add",
            "2001:db8:2::99/128",
            "dev",
            "eth0",
            "nodad",
        ],
    );
    let before = drops(&lab, "urpf_strict");
    let o = lab.exec(
        "h1",
        &[
            "ping",
            "-6",
            "-c",
            "3",
            "-i",
            "0.1",
            "-W",
            "1",
            "-I",
            "2001:db8:2::99",
            "2001:db8:2::10",
        ],
    );
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(
        drops(&lab, "urpf_strict") - before,
        3,
        "{}",
        lab.counters("r")
    );
    let o = lab.exec(
        "h1",
        &[
            "ping",
            "-6",
            "-c",
            "3",
            "-i",
            "0.1",
            "-W",
            "1",
            "-I",
            "2001:db8:1::10",
            "2001:db8:2::10",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    srv.kill().unwrap();
    srv.wait().unwrap();
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The multistage router (labs/multistage.toml) under a controller whose file holds the
/// router's filters, written once against its external interfaces (docs/filters.md, "In
/// the multistage router"): network A (vlan10) an ingress list and the strict check,
/// network B (vlan20) the loose one. The controller sends them over DIST until every LB
/// and back-end answers. nmap from a1 to b1 sees the denied port filtered and the others
/// open, the LB of network A counting the denials (the frames never reached a back-end);
/// hping3 with a spoofed source is dropped by the back-ends' reverse-path checks while
/// the same probe from a1's own address passes; `show router` on the controller counts
/// the router's filter drops as one; a reload of the controller's file changes the list
/// on the LBs.
#[test]
fn the_routers_filters_are_written_once_at_the_controller() {
    let dir = std::env::temp_dir().join(format!("tessera-filters-ms-{}", std::process::id()));
    let vcp = |port: u16| {
        format!(
            "[controller]\ninterface = \"vcp-int\"\nhello_interval_ms = 100\nterminate = false\n\n\
             [[acl]]\nname = \"edge\"\n\n[[acl.rule]]\naction = \"deny\"\nprotocol = \"tcp\"\n\
             dst = \"10.2.0.10/32\"\ndst_port = \"{port}\"\n\n\
             [[interface]]\nname = \"vlan10\"\nacl_in = \"edge\"\nurpf = \"strict\"\n\n\
             [[interface]]\nname = \"vlan20\"\nurpf = \"loose\"\n"
        )
    };
    let lab = multistage_with_controller(&dir, &vcp(22));
    let mut srv = servers(&lab, "b1", "10.2.0.10", &[22, 23, 80]);
    // Every LB and back-end holds the set the controller sent it.
    let all_current = |lab: &TestLab, version: u64| {
        let t = Instant::now();
        loop {
            let v = lab.show_json("acl", "vcp");
            let els = v["elements"].as_array().cloned().unwrap_or_default();
            if v["version"] == version
                && els.len() == 5
                && els
                    .iter()
                    .all(|e| e["current"] == true && e["status"] == "applied")
            {
                return v;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "filters not applied everywhere: {v}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    all_current(&lab, 1);
    let t = Instant::now();
    while lab
        .exec("a1", &["ping", "-c", "1", "-W", "1", "10.2.0.10"])
        .status
        .code()
        != Some(0)
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no path through the router"
        );
    }
    let states = nmap(&lab, "a1", "10.2.0.10", "22,23,80");
    let got: Vec<(u16, &str)> = states.iter().map(|(p, s, _)| (*p, s.as_str())).collect();
    assert_eq!(
        got,
        [(22, "filtered"), (23, "open"), (80, "open")],
        "{}",
        lab.show_json("acl", "lba")
    );
    let acl = lab.show_json("acl", "lba");
    assert_eq!(acl["from_controller"]["status"], "applied", "{acl}");
    assert!(
        acl["interfaces"][0]["denied_in"].as_u64().unwrap() >= 1,
        "{acl}"
    );
    let lb_denied = drop_count(&lab.counters("lba"), "acl_deny");
    assert!(lb_denied >= 1, "{}", lab.counters("lba"));
    // The back-ends' reverse-path checks: a1 sends from network B's address space (strict,
    // vlan10), b1 from an address the router has no route to (loose, vlan20).
    let backends = |reason: &str| -> u64 {
        ["r1", "r2", "r3"]
            .iter()
            .map(|r| drop_count(&lab.counters(r), reason))
            .sum()
    };
    assert_eq!(hping(&lab, "a1", "10.2.0.10", Some("10.2.0.99"), 5), 0);
    assert_eq!(backends("urpf_strict"), 5, "{}", lab.show_json("acl", "r1"));
    assert_eq!(hping(&lab, "b1", "10.1.0.10", Some("192.0.2.1"), 4), 0);
    assert_eq!(backends("urpf_loose"), 4);
    assert_eq!(hping(&lab, "a1", "10.2.0.10", None, 3), 3);
    // The router's view counts them as one (the elements report every second or so).
    let t = Instant::now();
    loop {
        let v = lab.show_json("router", "vcp");
        if v["total"]["filtered"].as_u64() >= Some(lb_denied + 9) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{v}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The list edited at the controller: 23 denied now, 22 open, on the LBs at once.
    std::fs::write(dir.join("multistage/vcp.toml"), vcp(23)).unwrap();
    let o = lab.tessera(&["reload", "--control", lab.control("vcp").to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    all_current(&lab, 2);
    let states = nmap(&lab, "a1", "10.2.0.10", "22,23");
    let got: Vec<(u16, &str)> = states.iter().map(|(p, s, _)| (*p, s.as_str())).collect();
    assert_eq!(
        got,
        [(22, "open"), (23, "filtered")],
        "{}",
        lab.show_json("acl", "lba")
    );
    srv.kill().unwrap();
    srv.wait().unwrap();
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The star router (labs/star.toml): s1 filters what enters from h1 (an ingress list and
/// the strict check), s3 what leaves toward h3 (an egress list), which crosses the star's
/// switch from s1 and is checked by s3 where it leaves. nmap from h1 sees 22 filtered
/// (s1's list), 23 filtered (s3's, across the switch) and 80 open; hping3 from h1 with a
/// source of h2's network is dropped by s1's strict check and counted.
#[test]
fn the_star_filters_where_frames_enter_and_leave() {
    let dir = std::env::temp_dir().join(format!("tessera-filters-star-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("star")).unwrap();
    for entry in std::fs::read_dir(repo_path("labs/star")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.join("star").join(p.file_name().unwrap())).unwrap();
    }
    let edit = |name: &str, iface: &str, keys: &str, acl: &str| {
        let path = dir.join("star").join(name);
        let c = std::fs::read_to_string(&path).unwrap();
        let from = format!("name = \"{iface}\"\n");
        assert!(c.contains(&from), "{name}");
        let c = c.replacen(&from, &format!("{from}{keys}\n"), 1);
        std::fs::write(&path, format!("{c}\n{acl}")).unwrap();
    };
    edit(
        "s1.toml",
        "s1-ext",
        "acl_in = \"edge-in\"\nurpf = \"strict\"",
        "[[acl]]\nname = \"edge-in\"\n\n[[acl.rule]]\naction = \"deny\"\nprotocol = \"tcp\"\ndst = \"10.3.0.10/32\"\ndst_port = \"22\"\n",
    );
    edit(
        "s3.toml",
        "s3-ext",
        "acl_out = \"to-h3\"",
        "[[acl]]\nname = \"to-h3\"\n\n[[acl.rule]]\naction = \"deny\"\nprotocol = \"tcp\"\ndst_port = \"23\"\n",
    );
    std::fs::copy(repo_path("labs/star.toml"), dir.join("lab.toml")).unwrap();
    let lab = TestLab::up(dir.join("lab.toml"), &[]);
    let mut srv = servers(&lab, "h3", "10.3.0.10", &[22, 23, 80]);
    let t = Instant::now();
    while lab
        .exec("h1", &["ping", "-c", "1", "-W", "1", "10.3.0.10"])
        .status
        .code()
        != Some(0)
    {
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "no path through the star"
        );
    }
    let states = nmap(&lab, "h1", "10.3.0.10", "22,23,80");
    let got: Vec<(u16, &str)> = states.iter().map(|(p, s, _)| (*p, s.as_str())).collect();
    assert_eq!(
        got,
        [(22, "filtered"), (23, "filtered"), (80, "open")],
        "{}\n{}",
        lab.show_json("acl", "s1"),
        lab.show_json("acl", "s3")
    );
    let s3 = lab.show_json("acl", "s3");
    assert!(
        s3["interfaces"][0]["denied_out"].as_u64().unwrap() >= 1,
        "{s3}"
    );
    assert!(drop_count(&lab.counters("s1"), "acl_deny") >= 1);
    let before = drop_count(&lab.counters("s1"), "urpf_strict");
    assert_eq!(hping(&lab, "h1", "10.3.0.10", Some("10.2.0.99"), 4), 0);
    assert_eq!(drop_count(&lab.counters("s1"), "urpf_strict") - before, 4);
    assert_eq!(hping(&lab, "h1", "10.3.0.10", None, 3), 3);
    srv.kill().unwrap();
    srv.wait().unwrap();
    drop(lab);
    std::fs::remove_dir_all(&dir).unwrap();
}
