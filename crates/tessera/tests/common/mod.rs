//! Lab fixtures for integration tests: each test gets its own copy of a topology under a
//! unique lab name, removed when the test ends (pass, fail or panic) and on SIGINT/SIGTERM.
//! Labs left by a test process that died (SIGKILL) are removed by the next run.
//!
//! These tests need root and iproute2, iputils-ping, iperf3 and ethtool (`.ci/run` installs
//! them); they fail, not skip, without them.

#![allow(dead_code)]

pub mod nfdump;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

pub fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_tessera")
}

pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

pub fn test_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(rel)
}

/// The packet I/O backend the lab tests run every element on: `TESSERA_TEST_IO` (auto,
/// xdp or packet), `xdp` by default. `scripts/test` runs the lab tests once per backend.
pub fn io_backend() -> &'static str {
    match std::env::var("TESSERA_TEST_IO").as_deref() {
        Ok("packet") => "packet",
        Ok("auto") => "auto",
        Ok("xdp") | Err(_) => "xdp",
        Ok(other) => panic!("TESSERA_TEST_IO={other:?}: use auto, xdp or packet"),
    }
}

static LIVE: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());
static SETUP: Once = Once::new();
static SEQ: AtomicUsize = AtomicUsize::new(0);

fn down(file: &Path, name: &str) {
    let _ = Command::new(exe())
        .args(["lab", "down"])
        .arg(file)
        .args(["--name", name])
        .output();
}

/// Once per test process: check prerequisites, remove labs of dead test processes, and
/// tear down this process's labs on SIGINT/SIGTERM.
fn setup() {
    SETUP.call_once(|| {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "the lab tests need root (network namespaces)");
        for tool in ["ip", "ping", "iperf3", "ethtool", "nft"] {
            let ok = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().map(|o| o.status.success()).unwrap_or(false);
            assert!(ok, "the lab tests need `{tool}`; .ci/run installs it (apt-get install iproute2 iputils-ping iperf3 ethtool nftables)");
        }
        if let Ok(dir) = std::fs::read_dir(lab::topology::RUN_DIR) {
            for d in dir.flatten() {
                let name = d.file_name().to_string_lossy().to_string();
                let pid = name.strip_prefix('t').and_then(|r| r.split('x').next()).and_then(|p| p.parse::<i32>().ok());
                if let Some(pid) = pid {
                    if !Path::new(&format!("/proc/{pid}")).exists() {
                        down(&repo_path("labs/single-router.toml"), &name);
                    }
                }
            }
        }
        let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])
            .expect("signal handler");
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                for (f, n) in LIVE.lock().map(|l| l.clone()).unwrap_or_default() {
                    down(&f, &n);
                }
                std::process::exit(128 + sig);
            }
        });
    });
}

/// A lab that is up for the life of this value.
pub struct TestLab {
    pub file: PathBuf,
    pub name: String,
}

impl TestLab {
    pub fn up(file: PathBuf, extra: &[&str]) -> TestLab {
        setup();
        let name = format!(
            "t{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        LIVE.lock().unwrap().push((file.clone(), name.clone()));
        let lab = TestLab { file, name };
        let out = Command::new(exe())
            .args(["lab", "up"])
            .arg(&lab.file)
            .args(["--name", &lab.name])
            // A test that names its backend keeps it.
            .args(if extra.contains(&"--io") {
                vec![]
            } else {
                vec!["--io", io_backend()]
            })
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "lab up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        lab
    }

    /// A node's whole element log (empty if it has none yet).
    pub fn log(&self, node: &str) -> String {
        let run = Path::new(lab::topology::RUN_DIR).join(&self.name);
        std::fs::read_to_string(run.join(format!("{node}.log"))).unwrap_or_default()
    }

    /// A restarted element's last run's log (`NAME.log.1`; empty if it never restarted).
    pub fn last_log(&self, node: &str) -> String {
        let run = Path::new(lab::topology::RUN_DIR).join(&self.name);
        std::fs::read_to_string(run.join(format!("{node}.log.1"))).unwrap_or_default()
    }

    /// The lines of a node's element log that hold every one of `words`.
    pub fn log_lines(&self, node: &str, words: &[&str]) -> Vec<String> {
        self.log(node)
            .lines()
            .filter(|l| words.iter().all(|w| l.contains(w)))
            .map(str::to_string)
            .collect()
    }

    /// What a failing test should print about a node: the last lines of its element's log
    /// and of each of its FRR daemons' logs (the lab's run directory goes with the lab).
    pub fn logs(&self, node: &str) -> String {
        let run = Path::new(lab::topology::RUN_DIR).join(&self.name);
        let mut files = vec![run.join(format!("{node}.log"))];
        if let Ok(dir) = std::fs::read_dir(run.join(format!("frr-{node}"))) {
            let mut logs: Vec<PathBuf> = dir
                .flatten()
                .map(|d| d.path())
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .collect();
            logs.sort();
            files.extend(logs);
        }
        files
            .iter()
            .map(|f| {
                format!(
                    "--- {} (its last 40 lines)\n{}\n",
                    f.display(),
                    lab::topology::log_tail(f, 40)
                )
            })
            .collect()
    }

    /// Runs a command in a node; returns its output whatever the exit status.
    pub fn exec(&self, node: &str, argv: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &format!("ts-{}-{node}", self.name)])
            .args(argv)
            .output()
            .unwrap()
    }

    /// Runs a command in a node and returns its stdout; panics with its stderr if it fails.
    pub fn sh(&self, node: &str, argv: &[&str]) -> String {
        let o = self.exec(node, argv);
        assert!(
            o.status.success(),
            "{node}: {argv:?} failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// TCP from `client` to `server` (a node, listening on `addr`) with iperf3 and
    /// `args` (e.g. `-t 2`): the client's JSON report. A one-off server is started and
    /// waited for until it listens (a server in the background, `-D`, was once not
    /// listening for all 5 s of tries, with nothing to say why); an attempt that reached
    /// it and failed ends it, so another is started. Panics if it moved under 1 MB, with
    /// the server's own output.
    pub fn iperf3(&self, client: &str, server: &str, addr: &str, args: &[&str]) -> Value {
        let mut srv = self.iperf3_server(server);
        let mut argv = vec!["iperf3", "-c", addr, "-J"];
        argv.extend(args);
        let mut report = String::new();
        for _ in 0..50 {
            let o = self.exec(client, &argv);
            report = String::from_utf8_lossy(&o.stdout).into_owned();
            if o.status.success() {
                break;
            }
            eprintln!("iperf3 {client} -> {addr} failed, tried again: {report}");
            if srv.ended() {
                srv = self.iperf3_server(server);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let v: Value = serde_json::from_str(&report)
            .unwrap_or_else(|e| panic!("{e}: {report}\nserver: {}", srv.output()));
        let bytes = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        assert!(
            bytes > 1_000_000,
            "{client} -> {addr}: received {bytes} bytes: {report}\nserver: {}",
            srv.output()
        );
        v
    }

    /// A one-off iperf3 server in `node` (`iperf3 -s -1`), returned once it listens on
    /// TCP port 5201 (or after 10 s, its output then saying why not). Ended on drop.
    pub fn iperf3_server(&self, node: &str) -> Iperf3Server {
        let log = std::env::temp_dir().join(format!(
            "iperf3-{}-{node}-{}.log",
            self.name,
            std::process::id()
        ));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &format!("ts-{}-{node}", self.name)])
            .args(["iperf3", "-s", "-1"])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let mut srv = Iperf3Server { child, log };
        self.wait_listening(node, 5201, std::time::Duration::from_secs(10), || {
            srv.ended()
        });
        srv
    }

    /// Waits until something in `node` listens on TCP `port`, for at most `limit` or
    /// until `gone` says the listener ended; says whether it listens.
    pub fn wait_listening(
        &self,
        node: &str,
        port: u16,
        limit: std::time::Duration,
        mut gone: impl FnMut() -> bool,
    ) -> bool {
        let t = std::time::Instant::now();
        let filter = format!("sport = :{port}");
        while t.elapsed() < limit && !gone() {
            let o = self.exec(node, &["ss", "-Hltn", &filter]);
            if !o.stdout.is_empty() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    }

    /// Every interface of the lab's namespaces (switches included) whose kernel counters
    /// say it dropped or lost frames, one line each: "node/ifname rx_dropped 3 ...". A
    /// veth counts there what a fast path redirected to it and its ring could not take
    /// (`rx_dropped` of the receiving end), which no element's counter can see.
    pub fn kernel_drops(&self) -> String {
        let prefix = format!("ts-{}-", self.name);
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let mut out = String::new();
        for ns in String::from_utf8_lossy(&list.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&prefix))
        {
            for (ifname, stats) in lab::drops::counters(ns) {
                let seen: Vec<String> = [
                    ("rx", "dropped"),
                    ("rx", "errors"),
                    ("rx", "missed"),
                    ("rx", "over_errors"),
                    ("tx", "dropped"),
                    ("tx", "errors"),
                ]
                .iter()
                .filter_map(|(d, k)| {
                    let n = stats[d][k].as_u64().unwrap_or(0);
                    (n > 0).then(|| format!("{d}_{k} {n}"))
                })
                .collect();
                if !seen.is_empty() {
                    out += &format!("{}/{ifname} {}\n", &ns[prefix.len()..], seen.join(" "));
                }
            }
        }
        out
    }

    /// Starts a command in a node with its output piped; the caller waits for it.
    pub fn spawn(&self, node: &str, argv: &[&str]) -> std::process::Child {
        Command::new("ip")
            .args(["netns", "exec", &format!("ts-{}-{node}", self.name)])
            .args(argv)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `tessera lab stop|start FILE NODE` on this lab; panics if it fails.
    pub fn element(&self, verb: &str, node: &str) {
        let o = self.tessera(&[
            "lab",
            verb,
            &self.file.to_string_lossy(),
            node,
            "--name",
            &self.name,
        ]);
        assert!(
            o.status.success(),
            "lab {verb} {node}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    pub fn tessera(&self, args: &[&str]) -> Output {
        Command::new(exe()).args(args).output().unwrap()
    }

    pub fn show(&self) -> Value {
        let o = Command::new(exe())
            .args(["lab", "show"])
            .arg(&self.file)
            .args(["--name", &self.name, "--json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    pub fn node(&self, name: &str) -> Value {
        self.show()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
            .unwrap()
    }

    pub fn mac(&self, node: &str, ifname: &str) -> String {
        let n = self.node(node);
        n["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == ifname)
            .unwrap()["mac"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The lab's DIST key (a topology with `dist_key = true`).
    pub fn dist_key(&self) -> PathBuf {
        Path::new(lab::topology::RUN_DIR)
            .join(&self.name)
            .join("dist.key")
    }

    pub fn control(&self, element: &str) -> PathBuf {
        Path::new(lab::topology::RUN_DIR)
            .join(&self.name)
            .join(format!("{element}.sock"))
    }

    /// What `tessera show WHAT --control` prints for an element, as JSON.
    pub fn show_json(&self, what: &str, element: &str) -> Value {
        let o = Command::new(exe())
            .args(["show", what, "--control"])
            .arg(self.control(element))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// `tessera show config` of an element: the text, after checking that `tessera check
    /// --role ROLE` takes it (written to a file of its own for that).
    /// The `fast_path` entry of interface `name` in `element`'s `show interfaces`.
    pub fn port_fast(&self, element: &str, name: &str) -> Value {
        let v = self.show_json("interfaces", element);
        fast_path_of(&v, name)
    }

    /// Interface `name` of `element` as `show interfaces` gives it.
    pub fn port(&self, element: &str, name: &str) -> Value {
        let v = self.show_json("interfaces", element);
        port_of(&v, name).clone()
    }

    pub fn shown_config(&self, element: &str, role: &str) -> String {
        let o = Command::new(exe())
            .args(["show", "config", "--control"])
            .arg(self.control(element))
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let file = std::env::temp_dir().join(format!(
            "tessera-shown-{}-{element}-{}.toml",
            self.name,
            std::process::id()
        ));
        std::fs::write(&file, &shown).unwrap();
        let o = Command::new(exe())
            .args(["check", "--config"])
            .arg(&file)
            .args(["--role", role])
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&file);
        assert!(
            o.status.success(),
            "{}\n{shown}",
            String::from_utf8_lossy(&o.stderr)
        );
        shown
    }

    /// The element's counters, as `tessera show counters` prints them.
    pub fn counters(&self, element: &str) -> Value {
        let o = Command::new(exe())
            .args(["show", "counters", "--control"])
            .arg(self.control(element))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "show counters: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    }
}

impl Drop for TestLab {
    fn drop(&mut self) {
        down(&self.file, &self.name);
        LIVE.lock()
            .map(|mut l| l.retain(|(_, n)| n != &self.name))
            .ok();
    }
}

/// The `fast_path` entry of interface `name` in a `show interfaces` answer `v`.
pub fn fast_path_of(v: &Value, name: &str) -> Value {
    port_of(v, name)["fast_path"].clone()
}

/// Interface `name` in a `show interfaces` answer.
pub fn port_of<'a>(v: &'a Value, name: &str) -> &'a Value {
    v.as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {v}"))
}

pub fn drop_count(c: &Value, reason: &str) -> u64 {
    c["drops"][reason]
        .as_u64()
        .unwrap_or_else(|| panic!("no drop counter {reason}"))
}

/// IPv4 packets the element forwarded, by user space (`ip4_forwarded`) or by its fast
/// path (`fast_path_forwarded`: every frame its programs forwarded, in labs of IPv4 alone
/// IPv4 packets).
pub fn forwarded4(c: &Value) -> u64 {
    event_count(c, "ip4_forwarded") + event_count(c, "fast_path_forwarded")
}

pub fn event_count(c: &Value, name: &str) -> u64 {
    c["events"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no event counter {name}"))
}

/// An iperf3 server a test started ([`TestLab::iperf3_server`]); ended, by its PID, on drop.
pub struct Iperf3Server {
    child: std::process::Child,
    log: PathBuf,
}

impl Iperf3Server {
    /// Whether it has exited (a one-off server ends after one test).
    pub fn ended(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// labs/multistage.toml copied into `dir` with a controller (`tessera controller`, its file
/// `vcp_toml`) in place of its plain vcp host, brought up: the lab of the tests of the
/// router's settings written once at the controller (filters, flow export). `dir` holds
/// the copied files (`multistage/vcp.toml` among them, for a test to change and reload).
pub fn multistage_with_controller(dir: &Path, vcp_toml: &str) -> TestLab {
    std::fs::create_dir_all(dir.join("multistage")).unwrap();
    for e in ["lba", "lbb", "r1", "r2", "r3"] {
        let c = std::fs::read_to_string(repo_path(&format!("labs/multistage/{e}.toml"))).unwrap();
        std::fs::write(dir.join(format!("multistage/{e}.toml")), c).unwrap();
    }
    std::fs::write(dir.join("multistage/vcp.toml"), vcp_toml).unwrap();
    let topo = std::fs::read_to_string(repo_path("labs/multistage.toml")).unwrap();
    let host = "[[host]]\nname = \"vcp\"\ninterfaces = [{ name = \"eth0\", address = \"10.255.0.100/24\" }]\n";
    assert!(
        topo.contains(host) && topo.contains("a = \"vcp:eth0\""),
        "{topo}"
    );
    let topo = topo
        .replace(
            host,
            "[[element]]\nname = \"vcp\"\nrole = \"controller\"\nconfig = \"multistage/vcp.toml\"\n",
        )
        .replace("a = \"vcp:eth0\"", "a = \"vcp:vcp-int\"");
    std::fs::write(dir.join("lab.toml"), topo).unwrap();
    TestLab::up(dir.join("lab.toml"), &[])
}

/// A stream of `tessera gen` (AF_PACKET, 20 kpps for 5 s) from host `from` (`src` to
/// `dst`, to the MAC `dst_mac`) into `tessera sink` on host `to`, with `restart` run
/// 0.8 s into it: (frames sent, frames the sink received).
pub fn stream_across(
    lab: &TestLab,
    (from, src): (&str, &str),
    (to, dst, dst_mac): (&str, &str, &str),
    restart: impl FnOnce(),
) -> (u64, u64) {
    let sink = lab.spawn(
        to,
        &[
            exe(),
            "sink",
            "--iface",
            "eth0",
            "--duration",
            "20",
            "--json",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(700));
    let gen = lab.spawn(
        from,
        &[
            exe(),
            "gen",
            "--iface",
            "eth0",
            "--dst-mac",
            dst_mac,
            "--src",
            src,
            "--dst",
            dst,
            "--rate",
            "20kpps",
            "--duration",
            "5",
            "--json",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(800));
    restart();
    let g = gen.wait_with_output().unwrap();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let g: serde_json::Value = serde_json::from_slice(&g.stdout).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: kill(2) on the sink we spawned (`ip netns exec` execs it), not yet reaped.
    unsafe { libc::kill(sink.id() as i32, libc::SIGINT) };
    let s = sink.wait_with_output().unwrap();
    let s: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    (g["sent"].as_u64().unwrap(), s["received"].as_u64().unwrap())
}
