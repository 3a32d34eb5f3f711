//! `tessera check`: every configuration the project ships passes; broken ones fail with
//! the file, the line and the key. Touches no interface (no root needed).

use std::path::{Path, PathBuf};
use std::process::Command;

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_tessera")
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn check(file: &Path, extra: &[&str]) -> (i32, String, String) {
    let o = Command::new(exe())
        .args(["check", "--config"])
        .arg(file)
        .args(extra)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tomls(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            tomls(&p, out);
        } else if p.extension().is_some_and(|x| x == "toml") {
            out.push(p);
        }
    }
}

#[test]
fn every_shipped_config_and_lab_passes() {
    let mut files = Vec::new();
    tomls(&repo("labs"), &mut files);
    assert!(files.len() > 20, "{files:?}");
    let mut labs = 0;
    for f in &files {
        let (code, out, err) = check(f, &["--json"]);
        assert_eq!(code, 0, "{}: {err}", f.display());
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["ok"], true, "{v}");
        if v["role"] == "lab" {
            labs += 1;
            // Each of its elements (but external ones) was read with its role.
            assert!(
                !v["elements"].as_array().unwrap().is_empty() || f.ends_with("bridge-line.toml"),
                "{v}"
            );
        }
    }
    assert!(labs >= 8, "{labs} labs");
    // The roles read from the files.
    let role = |rel: &str| {
        let (_, out, err) = check(&repo(rel), &["--json"]);
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|_| panic!("{rel}: {err}"));
        v["role"].as_str().unwrap().to_string()
    };
    assert_eq!(role("labs/multistage/lba.toml"), "balancer");
    assert_eq!(role("labs/multistage/r1.toml"), "forwarder");
    assert_eq!(role("labs/virtual-cp/vcp.toml"), "controller");
    assert_eq!(role("labs/switch/fair.toml"), "switch");
    assert_eq!(role("labs/multistage.toml"), "lab");
}

#[test]
fn broken_configs_fail_with_the_line_and_the_key() {
    let dir = std::env::temp_dir().join(format!("tessera-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // An unknown key on line 4 of a forwarder's config.
    let f = dir.join("r.toml");
    std::fs::write(
        &f,
        "[[interface]]\nname = \"r-eth0\"\naddress = \"10.1.0.1/24\"\nmtu_bytes = 1500\n",
    )
    .unwrap();
    let (code, _, err) = check(&f, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("r.toml:4") && err.contains("mtu_bytes"),
        "{err}"
    );
    // A bad value: the line and the key.
    std::fs::write(
        &f,
        "[[interface]]\nname = \"r-eth0\"\naddress = \"10.1.0.1/24\"\n\n[io]\nworkers = 0\n",
    )
    .unwrap();
    let (code, _, err) = check(&f, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("r.toml:6") && err.contains("io.workers"),
        "{err}"
    );
    // A lab whose element's file is broken: the element, its file, the line.
    let lab = dir.join("lab.toml");
    std::fs::write(
        &lab,
        "name = \"chk\"\n[[host]]\nname = \"h\"\ninterfaces = [{ name = \"eth0\", address = \"10.1.0.10/24\" }]\n[[element]]\nname = \"r\"\nrole = \"forwarder\"\nconfig = \"r.toml\"\n[[link]]\na = \"h:eth0\"\nb = \"r:r-eth0\"\n",
    )
    .unwrap();
    let (code, _, err) = check(&lab, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("element r") && err.contains("r.toml:6"),
        "{err}"
    );
    // The LB's file read as a forwarder's: refused, naming a key it does not know.
    let (code, _, err) = check(&repo("labs/multistage/lba.toml"), &["--role", "forwarder"]);
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = check(&f, &["--role", "router"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--role"), "{err}");
    let (code, _, err) = check(&dir.join("absent.toml"), &[]);
    assert_eq!(code, 1, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
