use super::*;

fn lab(src: &str) -> Result<Lab, String> {
    let dir =
        std::env::temp_dir().join(format!("tessera-topo-{}-{}", std::process::id(), fnv(src)));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("t.toml");
    std::fs::write(&p, src).unwrap();
    let r = Lab::load(&p, None, "tessera".into());
    std::fs::remove_dir_all(&dir).unwrap();
    r
}

const OK: &str = r#"
name = "t1"
[[host]]
name = "h1"
interfaces = [{ name = "eth0", address = "10.1.0.10/24" }]
[[switch]]
name = "sw"
[[element]]
name = "r"
role = "forwarder"
config = "r.toml"
[[link]]
a = "h1:eth0"
b = "sw"
[[link]]
a = "r:r-eth0"
b = "sw"
"#;

#[test]
fn takes_cpus_the_machine_has_and_refuses_others() {
    let first = io::placement::online_cpus()[0];
    let with = |c: &str| {
        OK.replace(
            "name = \"h1\"\n",
            &format!("name = \"h1\"\ncpus = \"{c}\"\n"),
        )
    };
    let l = lab(&with(&first.to_string())).unwrap();
    assert_eq!(l.cpus("h1").map(|c| c.cpus()), Some(vec![first]));
    assert_eq!(l.cpus("r"), None);
    let e = lab(&with("1000")).unwrap_err();
    assert!(e.contains("h1") && e.contains("no CPU 1000"), "{e}");
    let e = lab(&with("3-1")).unwrap_err();
    assert!(e.contains("h1: cpus = \"3-1\""), "{e}");
    let e = lab(&OK.replace(
        "config = \"r.toml\"\n",
        "config = \"r.toml\"\ncpus = \"x\"\n",
    ))
    .unwrap_err();
    assert!(e.contains("r: cpus"), "{e}");
}

#[test]
fn validates_topologies() {
    let l = lab(OK).unwrap();
    assert_eq!(l.ns("h1"), "ts-t1-h1");
    assert_eq!(l.mac("h1", "eth0"), l.mac("h1", "eth0"));
    assert_ne!(l.mac("h1", "eth0"), l.mac("h1", "eth1"));
    assert!(
        lab(&OK.replace("b = \"sw\"\n[[link]]", "b = \"nope\"\n[[link]]"))
            .unwrap_err()
            .contains("no node named \"nope\"")
    );
    assert!(
        lab(&OK.replace("a = \"h1:eth0\"", "a = \"h1:eth0\"\nqueues = 0"))
            .unwrap_err()
            .contains("queues = 0: use 1 to 64")
    );
    assert!(lab(&OK.replace("a = \"h1:eth0\"", "a = \"h1\""))
        .unwrap_err()
        .contains("needs an interface name"));
    assert!(
        lab(&OK.replace("role = \"forwarder\"", "role = \"router\""))
            .unwrap_err()
            .contains("is not one of forwarder, balancer")
    );
    let e = lab(&OK.replace("name = \"sw\"", "nam = \"sw\"")).unwrap_err();
    assert!(e.contains("t.toml:7: unknown field `nam`"), "{e}");
    assert!(lab(&OK.replace("name = \"sw\"", "name = \"h1\""))
        .unwrap_err()
        .contains("defined twice"));
}
