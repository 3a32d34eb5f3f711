//! What runs inside a lab's namespaces besides our elements: FRR (started, stopped, its
//! restart window), BIRD, Linux routers, and the hosts' SLAAC addresses and DHCP clients.

use super::*;

impl Lab {
    /// Where a host's BIRD listens for birdc.
    pub fn bird_socket(&self, node: &str) -> PathBuf {
        self.run_dir().join(format!("bird-{node}.ctl"))
    }

    /// Starts BIRD 2 in a host's namespace with `conf` (relative to the topology file).
    pub(super) fn start_bird(&self, node: &str, conf: &str) -> Result<(), String> {
        let cfg = self.dir.join(conf);
        let ctl = self.bird_socket(node);
        let pid = self.run_dir().join(format!("bird-{node}.pid"));
        let ns = self.ns(node);
        cmd::run(
            "ip",
            &[
                "netns",
                "exec",
                &ns,
                "bird",
                "-c",
                &cfg.to_string_lossy(),
                "-s",
                &ctl.to_string_lossy(),
                "-P",
                &pid.to_string_lossy(),
            ],
        )
        .map(|_| ())
        .map_err(|e| format!("host {node}: BIRD did not start (apt-get install bird2): {e}"))
    }

    /// Waits until every link of the lab is operationally up. The kernel activates a
    /// device's transmit queue (and sets its operstate) from a deferred work item up to a
    /// second after the carrier comes up; frames sent before that are dropped, so the
    /// first packets of a test would be lost.
    /// Waits (up to 5 s) until no address of `nodes` (the hosts and kernel routers that
    /// speak IPv6) is tentative: a link-local address leaves duplicate address detection
    /// about a second after its link came up, and answers nothing before. (`lab up` used to
    /// wait most of that second for its links; since they are up at once, a kernel
    /// router's first IPv6 pings went unanswered: bench_forward_lab, 2026-11-28.)
    pub(super) fn ipv6_addresses_settled(&self, nodes: &[&str]) -> Result<(), String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        for node in nodes {
            let ns = self.ns(node);
            loop {
                let tentative = cmd::run("ip", &["-n", &ns, "-6", "addr", "show", "tentative"])?;
                if !tentative.contains("inet6") {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    return Err(format!(
                        "{node}: IPv6 addresses still tentative after 5 s: {tentative}"
                    ));
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Waits (up to 10 s) until every host interface with `slaac = true` has a global IPv6
    /// address from a router advertisement.
    pub(super) fn slaac_addresses(&self) -> Result<(), String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for h in &self.topo.host {
            for i in h.interfaces.iter().filter(|i| i.slaac) {
                let ns = self.ns(&h.name);
                loop {
                    let out = cmd::run(
                        "ip",
                        &[
                            "-n", &ns, "-6", "addr", "show", "dev", &i.name, "scope", "global",
                        ],
                    )?;
                    let tentative = cmd::run(
                        "ip",
                        &["-n", &ns, "-6", "addr", "show", "dev", &i.name, "tentative"],
                    )?;
                    if out.contains("inet6") && !tentative.contains("inet6") {
                        break;
                    }
                    if std::time::Instant::now() > deadline {
                        return Err(format!(
                            "host {}: no IPv6 address by SLAAC on {} within 10 s (does its \
                             router send advertisements there? router_advertisements = true)",
                            h.name, i.name
                        ));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            }
        }
        Ok(())
    }

    /// Starts dhclient on every host interface with `dhcp = true`, all at once, and waits
    /// until each has its lease (dhclient -1 returns then, and runs on for renewals).
    pub(super) fn dhcp_clients(&self) -> Result<(), String> {
        let mut clients = Vec::new();
        for h in &self.topo.host {
            for i in h.interfaces.iter().filter(|i| i.dhcp) {
                let run = self.run_dir();
                let pf = run.join(format!("dhclient-{}-{}.pid", h.name, i.name));
                let lf = run.join(format!("dhclient-{}-{}.leases", h.name, i.name));
                let child = std::process::Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        &self.ns(&h.name),
                        "dhclient",
                        "-4",
                        "-1",
                        "-pf",
                    ])
                    .arg(&pf)
                    .arg("-lf")
                    .arg(&lf)
                    .arg(&i.name)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| {
                        format!(
                            "host {}: dhclient (apt-get install isc-dhcp-client): {e}",
                            h.name
                        )
                    })?;
                clients.push((h.name.clone(), i.name.clone(), child));
            }
        }
        let mut errors = Vec::new();
        for (host, ifname, c) in clients {
            match c.wait_with_output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => errors.push(format!(
                    "host {host}: dhclient got no lease on {ifname}: {}",
                    String::from_utf8_lossy(&o.stderr)
                        .lines()
                        .last()
                        .unwrap_or("")
                )),
                Err(e) => errors.push(format!("host {host}: dhclient: {e}")),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("\n"))
        }
    }

    pub(super) fn start_linux(&self, e: &Element) -> Result<(), String> {
        let ns = self.ns(&e.name);
        let cfg = control::ForwarderFile::load(&self.config_path(e)).map_err(|e| e.to_string())?;
        for i in &cfg.interfaces {
            if let Some((a, l)) = i.v4() {
                ip_n(&ns, &["addr", "add", &format!("{a}/{l}"), "dev", &i.name])?;
            }
            if let Some(m) = i.mtu {
                ip_n(&ns, &["link", "set", &i.name, "mtu", &m.to_string()])?;
            }
            for (a, l) in &i.addrs6 {
                let a = format!("{a}/{l}");
                ip_n(&ns, &["-6", "addr", "add", &a, "dev", &i.name, "nodad"])?;
            }
        }
        in_ns(&ns, "sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
        if !cfg.routes6.is_empty() || cfg.interfaces.iter().any(|i| !i.addrs6.is_empty()) {
            in_ns(&ns, "sysctl", &["-qw", "net.ipv6.conf.all.forwarding=1"])?;
        }
        // The same routes the forwarder would load, gateways checked the same way.
        let nets: Vec<Option<fib::Prefix>> = cfg.interfaces.iter().map(|i| i.net()).collect();
        let (routes, routes6) = control::run::config_routes_all(&cfg, |gw| {
            nets.iter()
                .position(|n| n.is_some_and(|n| n.contains(gw)))
                .map(|p| p as u16)
        })?;
        // `ip` takes the family from the prefix.
        let batch: String = routes
            .iter()
            .map(|(p, via)| linux_route(*p, via))
            .chain(routes6.iter().map(|(p, via)| {
                let via: Vec<String> = via
                    .iter()
                    .map(|&a| super::linux_via6(a, &cfg.interfaces))
                    .collect();
                linux_route(*p, &via)
            }))
            .collect();
        if !batch.is_empty() {
            let p = self.run_dir().join(format!("{}.routes", e.name));
            std::fs::write(&p, batch).map_err(|e| e.to_string())?;
            cmd::run("ip", &["-n", &ns, "-batch", &p.to_string_lossy()])?;
        }
        Ok(())
    }

    /// Starts a node's FRR daemons in its namespace, zebra first (with the FPM module for
    /// a controller, `fpm`); their pid files, sockets and logs live in the lab's run
    /// directory (`frr-<node>/`).
    pub(super) fn start_frr(
        &self,
        node: &str,
        frr: &BTreeMap<String, String>,
        fpm: bool,
    ) -> Result<(), String> {
        if frr.is_empty() {
            return Ok(());
        }
        let bin = Path::new("/usr/lib/frr");
        if !bin.join("zebra").exists() {
            return Err(format!(
                "{node}: FRR is not installed (apt-get install frr)"
            ));
        }
        let run = self.run_dir().join(format!("frr-{node}"));
        std::fs::create_dir_all(&run).map_err(|err| format!("{}: {err}", run.display()))?;
        cmd::run("chown", &["frr:frr", &run.to_string_lossy()])?;
        let ns = self.ns(node);
        let zserv = run.join("zserv.api");
        let order = FRR_DAEMONS.iter().filter(|d| frr.contains_key(**d));
        for d in order {
            // The daemons read their config after dropping to user frr, who may not
            // reach the topology's directory (a checkout under /root, or in a directory
            // made by mktemp, is closed to other users): without it they would run
            // unconfigured, silently. A copy in the run directory is always theirs.
            let src = self.dir.join(&frr[*d]);
            let cfg = run.join(format!("{d}.conf"));
            std::fs::copy(&src, &cfg)
                .map_err(|e| format!("{node}: {d}'s config {}: {e}", src.display()))?;
            cmd::run("chown", &["frr:frr", &cfg.to_string_lossy()])?;
            let exe = bin.join(d);
            let mut args: Vec<String> = vec![
                "netns".into(),
                "exec".into(),
                ns.clone(),
                exe.to_string_lossy().into(),
                "-d".into(),
                "-f".into(),
                cfg.to_string_lossy().into(),
                "-i".into(),
                run.join(format!("{d}.pid")).to_string_lossy().into(),
                "-z".into(),
                zserv.to_string_lossy().into(),
                "--vty_socket".into(),
                run.to_string_lossy().into(),
                "-u".into(),
                "frr".into(),
                "-g".into(),
                "frr".into(),
                "--log".into(),
                format!("file:{}", run.join(format!("{d}.log")).display()),
            ];
            if *d == "zebra" && fpm {
                args.extend(["-M".into(), "dplane_fpm_nl".into()]);
            }
            let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
            cmd::run("ip", &refs)?;
            if *d == "zebra" {
                let t = Instant::now();
                while !zserv.exists() && t.elapsed() < Duration::from_secs(10) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        Ok(())
    }

    /// The FRR daemons of an element that run whatever its role (all but `frr_active`).
    pub(super) fn frr_always(&self, e: &Element) -> BTreeMap<String, String> {
        e.frr
            .iter()
            .filter(|(d, _)| !e.frr_active.contains(d))
            .map(|(d, f)| (d.clone(), f.clone()))
            .collect()
    }

    /// Starts an element's `frr_active` daemons that are not running (`tessera lab frr-start`: a
    /// controller's `[takeover] on_active` command). With `graceful_restart`, ospfd
    /// starts in graceful-restart mode (RFC 3623; its state file says a restart is under
    /// way for `grace_s` seconds): it keeps what its neighbours, which the controller's
    /// Grace-LSA made helpers, still hold, and re-originates only once its adjacencies are
    /// back. bgpd restarts gracefully by itself when its config enables it.
    pub fn frr_start(
        &self,
        node: &str,
        graceful_restart: Option<u32>,
    ) -> Result<Vec<String>, String> {
        let e = self.element(node)?;
        let run = self.run_dir().join(format!("frr-{node}"));
        let ns = cmd::ns_pids(&self.ns(node));
        let running = |d: &str| {
            std::fs::read_to_string(run.join(format!("{d}.pid")))
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .is_some_and(|p| ns.contains(&p) && cmd::alive(p))
        };
        let todo: BTreeMap<String, String> = e
            .frr
            .iter()
            .filter(|(d, _)| e.frr_active.contains(d) && !running(d))
            .map(|(d, f)| (d.clone(), f.clone()))
            .collect();
        if let (Some(grace), true) = (graceful_restart, todo.contains_key("ospfd")) {
            // ospfd's state file (FRR 8.4: /var/run/frr/ospfd-gr.json), read and cleared
            // by ospfd when it starts.
            let until = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
                + grace as u64;
            let state = serde_json::json!({"instances": {"default": {"gracePeriod": grace, "timestamp": until}}});
            let path = Path::new("/var/run/frr/ospfd-gr.json");
            std::fs::create_dir_all("/var/run/frr").map_err(|e| e.to_string())?;
            std::fs::write(path, state.to_string())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            cmd::run("chown", &["frr:frr", &path.to_string_lossy()])?;
        }
        self.start_frr(node, &todo, true)?;
        Ok(todo.into_keys().collect())
    }

    /// The pids of a node's running FRR daemons (from their pid files).
    pub(super) fn frr_pids(&self, node: &str) -> Vec<i32> {
        let run = self.run_dir().join(format!("frr-{node}"));
        let ns = cmd::ns_pids(&self.ns(node));
        FRR_DAEMONS
            .iter()
            .filter_map(|d| std::fs::read_to_string(run.join(format!("{d}.pid"))).ok())
            .filter_map(|s| s.trim().parse().ok())
            .filter(|p| ns.contains(p) && cmd::alive(*p))
            .collect()
    }

    pub(super) fn frr_running(&self, node: &str) -> bool {
        !self.frr_pids(node).is_empty()
    }

    /// Stops an element's `frr_active` daemons (`tessera lab frr-stop`: a controller's
    /// `[takeover] on_standby` command), SIGTERM.
    pub fn frr_stop(&self, node: &str) -> Result<Vec<String>, String> {
        let e = self.element(node)?;
        let run = self.run_dir().join(format!("frr-{node}"));
        let ns = cmd::ns_pids(&self.ns(node));
        let mut stopped = Vec::new();
        for d in &e.frr_active {
            let pid = std::fs::read_to_string(run.join(format!("{d}.pid")))
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok());
            if let Some(p) = pid.filter(|p| ns.contains(p) && cmd::alive(*p)) {
                cmd::terminate(p, Duration::from_secs(3));
                stopped.push(d.clone());
            }
        }
        Ok(stopped)
    }

    /// Kills a node's FRR daemons at once (SIGKILL: no goodbye to the peers, as when the
    /// machine fails).
    pub fn stop_frr(&self, node: &str) -> Result<(), String> {
        self.element(node)?;
        for pid in self.frr_pids(node) {
            // SAFETY: kill(2) on a pid of this lab's namespace, read from its pid file.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let t = Instant::now();
        while self.frr_running(node) && t.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}
