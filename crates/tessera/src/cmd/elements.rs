//! The elements: `tessera forwarder`, `balancer`, `switch`, `axon` and `controller`, with
//! the arguments they share.

use crate::*;

/// What every element takes on the command line.
#[derive(clap::Args)]
pub(crate) struct ElementArgs {
    #[arg(long)]
    pub(crate) config: PathBuf,
    /// Serve counters and state on this Unix socket (JSON lines).
    #[arg(long)]
    pub(crate) control: Option<PathBuf>,
    /// Packet I/O backend, overriding the config's `[io] backend`: auto, xdp or packet.
    #[arg(long, value_name = "BACKEND")]
    pub(crate) io: Option<String>,
    /// The fast path on or off (`[io] fast_path`), whatever the config says: in the
    /// ports' XDP programs on AF_XDP, in their tcx programs on AF_PACKET (the forwarder's;
    /// the LB's, the switch's and the Axon's are XDP's alone). On by default in
    /// forwarders, back-ends, LBs, switches and Axons; `--fast-path` alone means true.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub(crate) fast_path: Option<bool>,
    /// The DIST key (hex digits in a file), overriding the config's `[dist] key_file`.
    #[arg(long, value_name = "FILE")]
    pub(crate) dist_key_file: Option<PathBuf>,
    /// The CPUs to run on, as `[io] cpus` says ("4-5", "0-3,8"), overriding the config's:
    /// workers pinned to them, the ports' receive work in NAPI threads pinned beside them.
    #[arg(long, value_name = "LIST")]
    pub(crate) cpus: Option<String>,
}

impl ElementArgs {
    /// Applies `--cpus` to `io` and keeps the process to the CPUs it names (before any
    /// thread starts, so that every thread inherits them).
    fn place(&self, io: &mut control::config::IoConfig) -> Result<()> {
        if let Some(c) = &self.cpus {
            io.cpus = Some(
                io::placement::CpuList::parse(c)
                    .map_err(|e| anyhow::anyhow!("--cpus {c:?}: {e}"))?,
            );
        }
        control::run::place_process(io).map_err(anyhow::Error::msg)
    }

    /// Applies `--fast-path` to `io`.
    fn fast(&self, io: &mut control::config::IoConfig) {
        if let Some(on) = self.fast_path {
            io.fast_path = on;
            io.fast_path_set = true;
        }
    }

    /// Applies `--dist-key-file` to `dist` and says loudly if DIST stays unauthenticated.
    fn dist(&self, dist: &mut control::config::DistConfig, element: &str) -> Result<()> {
        if let Some(f) = &self.dist_key_file {
            dist.set_key_file(f)
                .map_err(|e| anyhow::anyhow!("--dist-key-file: {e}"))?;
        }
        dist.warn_if_open(element);
        Ok(())
    }
}

/// `--io BACKEND`, if given.
pub(crate) fn backend_arg(io: Option<&str>) -> Result<Option<io::Backend>> {
    io.map(|b| {
        io::Backend::parse(b).with_context(|| format!("--io {b:?}: use auto, xdp or packet"))
    })
    .transpose()
}

pub(crate) fn forwarder(a: &ElementArgs) -> Result<i32> {
    use dataplane::port::Port;
    let (config, control) = (a.config.as_path(), a.control.as_deref());
    let mut cfg = control::ForwarderFile::load(config)?;
    if let Some(b) = backend_arg(a.io.as_deref())? {
        cfg.io.backend = b;
    }
    a.place(&mut cfg.io)?;
    a.fast(&mut cfg.io);
    if cfg.backend.is_some() {
        a.dist(&mut cfg.dist, "back-end")?;
    }
    let stop = stop_on_signals()?;
    let mut links = Vec::new();
    // Sub-interfaces ride on their parent's port.
    let names: Vec<&str> = cfg
        .interfaces
        .iter()
        .filter(|i| i.vlan.is_none())
        .map(|i| i.name.as_str())
        .collect();
    for name in &names {
        links.push(take_port(name)?);
    }
    let t = std::time::Instant::now();
    let mut f = control::run::build(&cfg, &links).map_err(anyhow::Error::msg)?;
    let build_ms = t.elapsed().as_millis() as u64;
    let off = (!cfg.io.fast_path).then(|| "[io] fast_path = false".to_string());
    let fast = match &off {
        None => {
            let fl = control::fast::ForwarderFast::new(&f.ifaces).map_err(anyhow::Error::msg)?;
            fl.watch_egress(stop.clone());
            Some(fl)
        }
        Some(_) => None,
    };
    // A forwarder hands its XDP fast path over to its next start: the links pinned as the
    // ports open, the maps a successor reads, a deadline kept ahead. A back-end's start
    // leaves its predecessor's programs running for three of its hello intervals, while
    // the LBs learn of it (control::fast::ForwarderFast::defer_takeover).
    let handover = handover(fast.is_some(), &cfg.io);
    let backend_handover = cfg.backend.is_some() && handover.is_some();
    io::pin::defer_takeover(backend_handover);
    let mut attachments = Vec::new();
    if let Some(fl) = &fast {
        // What a predecessor's fast path knew, and the table, before any program: one
        // that takes a running predecessor's place forwards from its first frame.
        let adopted = fl.adopt(&mut f);
        if let Some(t) = f.routes() {
            fl.publish(t).map_err(anyhow::Error::msg)?;
        }
        fl.sync_routes6_now(&mut f);
        fl.sync_neighbours(&f);
        if fl.counters()["taken_over"].is_object() {
            tracing::info!(
                neighbours = adopted,
                "fast path: taking over from this forwarder's last start"
            );
        }
    }
    let workers = cfg.io.workers;
    // ports[w]: the ports worker w owns, one per interface.
    let mut ports: Vec<Vec<io::AnyPort>> = (0..workers).map(|_| Vec::new()).collect();
    let mut umems = cfg.io.shared_umem.then(|| io::Umems::new(&names, workers));
    // Per AF_XDP port, whether its tcx hook runs the fast path's hand-off. Taken as
    // there from the first frame: a port's hand-off attaches before its XDP program, so
    // an XDP program that hands a frame over always has it (a restart's first frames
    // included); where one could not attach, it is off for every port once they are open.
    let mut handoffs = Vec::new();
    if let Some(fl) = &fast {
        if let Ok(fp) = fl.fp.lock() {
            fp.set_handoff(true)
                .map_err(|e| anyhow::anyhow!("fast path: {e}"))?;
        }
    }
    for (k, (name, link)) in names.iter().zip(&links).enumerate() {
        let ring = cfg.io.packet_ring;
        // As configured: a back-end's port to the router's own switch (its peer is an
        // element of ours), and every port of a star member (the tcx fast path leaves a
        // frame bound across the star's switch to user space; XDP carries it).
        let internal = cfg
            .backend
            .as_ref()
            .and_then(|b| cfg.interfaces.get(b.internal))
            .is_some_and(|i| i.name == *name);
        let choose = fast.is_some() && cfg.star.is_none() && !internal;
        let (backend, why) = port_backend(cfg.io.backend, choose, name);
        let mut mine = match &fast {
            Some(fl) => {
                let mut facts = control::fast::ForwarderFast::facts(&f, k as u32, link.mac.0);
                facts.slow_path_limit = cfg.io.slow_path_limit;
                let program = |hook: io::xsk::Hook| match fl.fp.lock() {
                    Ok(fp) => fp.program(&facts, hook),
                    Err(_) => Err(std::io::Error::other("the fast path's lock is poisoned")),
                };
                io::open_workers(name, backend, ring, Some(&program), workers, umems.as_mut())?
            }
            None => io::open_workers(name, backend, ring, None, workers, umems.as_mut())?,
        };
        if fast.is_some() {
            settle_port(name, &mut mine, why);
        }
        let info = mine[0].info();
        tracing::info!(interface = name, backend = info.backend, mode = %info.mode, workers, "port open");
        attachments.extend(mine[0].fast_path_link());
        handoffs.push(hands_off(&mine[0]));
        for (w, p) in mine.into_iter().enumerate() {
            ports[w].push(p);
        }
    }
    if let Some(fl) = fast.as_ref().filter(|_| !handoffs.iter().all(|&h| h)) {
        // A port whose tcx hook could not take the hand-off (a kernel without tcx):
        // frames bound to devices that take no XDP frames are user space's.
        if let Ok(fp) = fl.fp.lock() {
            fp.set_handoff(false)
                .map_err(|e| anyhow::anyhow!("fast path: {e}"))?;
        }
    }
    if let (Some(fl), Some(grace), Some(b)) = (&fast, handover, &cfg.backend) {
        // Half the grace at most: the predecessor's programs stop at its end.
        let hellos = std::time::Duration::from_millis(3 * b.hello_interval_ms);
        fl.defer_takeover(attachments, hellos.min(grace / 2));
    }
    control::run::place_ports(&cfg.io, &names);
    if let (Some(fl), Some(grace)) = (&fast, handover) {
        fl.hand_over(grace, stop.clone());
    }
    tracing::info!(
        interfaces = %ports[0].iter().map(|p| p.name()).collect::<Vec<_>>().join(","),
        routes = f.route_count(),
        build_ms,
        fast_path = fast.is_some(),
        workers,
        "forwarder running"
    );
    let s = control::run::run(f, ports, Some(&cfg), control, stop, fast, off)
        .map_err(anyhow::Error::msg)?;
    let dropped: u64 = s.drops.values().sum();
    tracing::info!(
        forwarded = s.events["ip4_forwarded"],
        dropped,
        "forwarder stopped"
    );
    Ok(0)
}

/// Whether a port's frames bound to a device that takes no XDP frames can go through the
/// hand-off to tcx (`io::handoff`): its interface's tcx hook runs it, or the port runs no
/// XDP program of the element's (AF_PACKET), so it hands nothing over.
/// A forwarder's port's backend: `[io] backend`, except that by default ("auto") a port
/// with the fast path whose veth peer sends only socket buffers (no NAPI there: a
/// container's end, a wire-like host's) runs on AF_PACKET with the fast path in tcx
/// ([`io::egress::socket_buffers_only`] says why; docs/forwarder.md, "Ports on AF_PACKET
/// by choice"). Chosen as the port opens; a peer that changes later leaves it as it is.
fn port_backend(configured: io::Backend, fast: bool, name: &str) -> (io::Backend, Option<String>) {
    match configured {
        io::Backend::Auto if fast => match io::egress::socket_buffers_only(name) {
            Some(why) => (io::Backend::Packet, Some(why)),
            None => (configured, None),
        },
        _ => (configured, None),
    }
}

/// After a forwarder's port opened with its fast path: says why it is on AF_PACKET where
/// that was chosen (`why`), and ends the links of the other kind that the element's last
/// start pinned for it (its XDP and hand-off links where the port is now on AF_PACKET,
/// its tcx link where it is now on AF_XDP), which this start's program does not take
/// over and which would otherwise run on beside it.
fn settle_port(name: &str, ports: &mut [io::AnyPort], why: Option<String>) {
    let on_packet = matches!(ports.first(), Some(io::AnyPort::Packet(_)));
    if let Some(w) = why {
        tracing::info!(interface = name, why = %w, "port on AF_PACKET, its fast path in tcx");
        for p in ports.iter_mut() {
            if let io::AnyPort::Packet(p) = p {
                p.set_why(w.clone());
            }
        }
    }
    let Ok(ifindex) = io::netdev::ifindex(name) else {
        return;
    };
    let other: &[&'static str] = if on_packet {
        &["link-drv", "link-skb", "link-handoff"]
    } else {
        &["link-tcx"]
    };
    let ended = io::pin::retire(ifindex as u32, other);
    if !ended.is_empty() {
        tracing::info!(interface = name, links = ?ended, "fast path: the last start's links of the port's other backend ended");
    }
}

fn hands_off(p: &io::AnyPort) -> bool {
    p.attachment().is_none_or(|a| a.handoff())
}

/// Takes an interface from the kernel's IP stack; what the system says of it.
pub(crate) fn take_port(name: &str) -> Result<control::run::Link> {
    io::netdev::take_over(name)?;
    Ok(control::run::Link {
        mac: wire::MacAddr(io::netdev::mac(name)?),
        mtu: io::netdev::mtu(name)?,
        speed_mbps: io::netdev::speed_mbps(name),
    })
}

/// Takes an interface from the kernel's IP stack and opens its port as `io` says (on the
/// element's shared UMEM `umems`, if given).
pub(crate) fn open_port(
    name: &str,
    io: &control::config::IoConfig,
    umems: Option<&mut io::Umems>,
) -> Result<(io::AnyPort, control::run::Link)> {
    if io.workers > 1 {
        bail!(
            "[io] workers = {}: the forwarder, the back-end and the LB run several workers; this element runs one",
            io.workers
        );
    }
    let link = take_port(name)?;
    let port = io::open_with(name, io.backend, io.packet_ring, None, umems)?;
    let info = dataplane::port::Port::info(&port);
    tracing::info!(interface = name, backend = info.backend, mode = %info.mode, "port open");
    Ok((port, link))
}

/// Why the LB runs without its fast path (None: it runs it). The fast path is an XDP
/// program: its ports are AF_XDP's. Said outright (`[io] fast_path = true`), the backend
/// becomes "xdp" ("auto" does not fall back to AF_PACKET then), and "packet" is an error;
/// by default, a port that cannot open AF_XDP runs on AF_PACKET without it, and says so.
fn lb_fast_off(io_cfg: &mut control::config::IoConfig, config: &Path) -> Result<Option<String>> {
    let mut off = (!io_cfg.fast_path).then(|| "[io] fast_path = false".to_string());
    if io_cfg.fast_path && io_cfg.backend == io::Backend::Packet {
        if io_cfg.fast_path_set {
            bail!(
                "{}: [io] fast_path of the LB runs in XDP: it needs backend = \"xdp\" or \"auto\", not \"packet\"",
                config.display()
            );
        }
        off = Some("the LB's fast path runs in XDP, and [io] backend = \"packet\"".into());
    }
    if io_cfg.fast_path && io_cfg.fast_path_set {
        io_cfg.backend = io::Backend::Xdp;
    }
    Ok(off)
}

/// The log line of an LB that runs: its interfaces, back-ends, mode, fast path, workers.
fn log_lb_running(
    cfg: &control::balancer::BalancerFile,
    b: &dataplane::balancer::Balancer,
    fast_path: bool,
) {
    tracing::info!(
        interfaces = %cfg.interfaces.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(","),
        backends = b.table.entries.len(),
        mode = ?b.table.mode,
        fast_path,
        workers = cfg.io.workers,
        "balancer running"
    );
}

pub(crate) fn balancer(a: &ElementArgs) -> Result<i32> {
    let (config, control) = (a.config.as_path(), a.control.as_deref());
    let mut cfg = control::balancer::BalancerFile::load(config)?;
    if let Some(b) = backend_arg(a.io.as_deref())? {
        cfg.io.backend = b;
    }
    a.place(&mut cfg.io)?;
    a.dist(&mut cfg.dist, "balancer")?;
    a.fast(&mut cfg.io);
    let off = lb_fast_off(&mut cfg.io, config)?;
    let mut fast_off = std::collections::HashMap::new();
    let stop = stop_on_signals()?;
    let workers = cfg.io.workers;
    // ports[w]: the ports worker w owns, one per interface.
    let mut ports: Vec<Vec<io::AnyPort>> = (0..workers).map(|_| Vec::new()).collect();
    let mut links = Vec::new();
    for i in &cfg.interfaces {
        links.push(take_port(&i.name)?);
    }
    let mut umems = cfg.io.shared_umem.then(|| {
        let names: Vec<&str> = cfg.interfaces.iter().map(|i| i.name.as_str()).collect();
        io::Umems::new(&names, workers)
    });
    let mut b = control::balancer::build(&cfg, &links).map_err(anyhow::Error::msg)?;
    let fast = match &off {
        None => {
            let names: Vec<String> = cfg.interfaces.iter().map(|i| i.name.clone()).collect();
            let fl = control::lbfast::LbFast::new(&names).map_err(anyhow::Error::msg)?;
            fl.watch_egress(stop.clone());
            Some(fl)
        }
        Some(why) => {
            for i in &cfg.interfaces {
                fast_off.insert(i.name.clone(), why.clone());
            }
            None
        }
    };
    // Per port running the fast path's program: its facts and attachment, where a
    // reload puts the program of changed rules.
    let mut programs = Vec::new();
    // The LB hands its fast path over to its next start: the links pinned as the ports
    // open, a deadline kept ahead.
    let handover = handover(fast.is_some(), &cfg.io);
    // A predecessor's programs balance on in the pinned links until this LB's state is
    // published (control::balancer::run).
    io::pin::defer_takeover(fast.is_some());
    let mut lb_handoffs = Vec::new();
    for (k, i) in cfg.interfaces.iter().enumerate() {
        let facts = control::lbfast::LbFast::facts(&b, k as u32);
        let program = |hook: io::xsk::Hook| match (&fast, hook) {
            (Some(fl), io::xsk::Hook::Xdp(xsk)) => fl.fp.program(&facts, xsk),
            _ => Err(io::xsk::xdp_only()),
        };
        let program = fast.as_ref().map(|_| &program as io::xsk::ProgramFor);
        let (ring, backend) = (cfg.io.packet_ring, cfg.io.backend);
        let mine = match program {
            // By default, on "auto": AF_XDP with the fast path, else AF_PACKET without.
            Some(p) if backend == io::Backend::Auto => {
                match io::open_workers(
                    &i.name,
                    io::Backend::Xdp,
                    ring,
                    Some(p),
                    workers,
                    umems.as_mut(),
                ) {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(interface = %i.name, reason = %e, "AF_XDP unavailable; using AF_PACKET, without the fast path");
                        fast_off.insert(
                            i.name.clone(),
                            format!("AF_XDP unavailable ({e}): AF_PACKET, without the fast path"),
                        );
                        io::open_workers(&i.name, io::Backend::Packet, ring, None, workers, None)?
                    }
                }
            }
            p => io::open_workers(&i.name, backend, ring, p, workers, umems.as_mut())?,
        };
        let info = dataplane::port::Port::info(&mine[0]);
        tracing::info!(interface = %i.name, backend = info.backend, mode = %info.mode, workers, "port open");
        if let (Some(_), Some(att)) = (&fast, mine[0].attachment()) {
            if !fast_off.contains_key(&i.name) {
                programs.push((facts.clone(), att));
            }
        }
        // A port without the fast path's program (AF_PACKET) runs no XDP: it hands nothing.
        lb_handoffs.push(hands_off(&mine[0]));
        for (w, p) in mine.into_iter().enumerate() {
            ports[w].push(p);
        }
    }
    // Frames bound to a device that takes no XDP frames leave through the hand-off to tcx
    // where every port's hook runs it (the state published next says so).
    if let Some(fl) = &fast {
        fl.fp.set_handoff(lb_handoffs.iter().all(|&h| h));
    }
    let handed = match (&fast, handover) {
        (Some(fl), Some(grace)) => fl.hand_over(grace, stop.clone()),
        _ => false,
    };
    // Of a spare pair: stopping, the active LB tells the other to take over at once
    // (dataplane::balancer::spare); with its fast path handed over, only while it hears
    // the other, and then the hand-over is withdrawn (below).
    let mut withdraw = None;
    if let Some(s) = &mut b.spare {
        s.handed_over = handed;
        withdraw = Some(s.withdraw_hand_over.clone());
    }
    let names: Vec<&str> = cfg.interfaces.iter().map(|i| i.name.as_str()).collect();
    control::run::place_ports(&cfg.io, &names);
    log_lb_running(&cfg, &b, fast.is_some());
    let how = control::balancer::RunWith {
        io: cfg.io,
        metrics: cfg.metrics.clone(),
        // The external interfaces' names (the router view's ports).
        external: cfg
            .interfaces
            .iter()
            .filter(|i| i.role == wire::dist::PortRole::External)
            .map(|i| i.name.clone())
            .collect(),
        fast,
        fast_off,
        config: Some(config.to_path_buf()),
        programs,
    };
    let names: Vec<String> = cfg.interfaces.iter().map(|i| i.name.clone()).collect();
    let s = control::balancer::run(b, ports, control, stop, how).map_err(anyhow::Error::msg)?;
    // A standby, or an active LB whose spare took the network at its last hello: the next
    // start begins standby, not resuming what this one's programs would have carried.
    if withdraw.is_some_and(|w| w.load(std::sync::atomic::Ordering::Relaxed)) {
        control::fast::unpin_links(&names);
        tracing::info!(
            "fast path: not handed over after all: this LB was standby, or its spare took the network"
        );
    }
    tracing::info!(
        balanced = s.events["balance_packets"],
        dropped = s.drops.values().sum::<u64>(),
        "balancer stopped"
    );
    Ok(0)
}

pub(crate) fn switch(a: &ElementArgs) -> Result<i32> {
    let (config, control) = (a.config.as_path(), a.control.as_deref());
    let mut cfg = control::switch::SwitchFile::load(config)?;
    if let Some(b) = backend_arg(a.io.as_deref())? {
        cfg.io.backend = b;
    }
    a.place(&mut cfg.io)?;
    a.fast(&mut cfg.io);
    let off = xdp_fast_off(&cfg.io, config, "the switch")?;
    if a.dist_key_file.is_some() {
        tracing::info!("a switch speaks no DIST: --dist-key-file is not used");
    }
    let stop = stop_on_signals()?;
    let mut umems = cfg.io.shared_umem.then(|| {
        let names: Vec<&str> = cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect();
        io::Umems::new(&names, 1)
    });
    let mut fast = match &off {
        None => Some(control::switch::SwitchFast::new(&cfg.cfg).map_err(anyhow::Error::msg)?),
        Some(_) => None,
    };
    let names: Vec<String> = cfg.cfg.ports.iter().map(|p| p.name.clone()).collect();
    let counters = Arc::new(dataplane::Counters::for_role(
        names.clone(),
        dataplane::counters::Scope::Switch,
    ));
    let mut sw = dataplane::switch::Switch::new(
        cfg.cfg.clone(),
        counters.clone(),
        std::time::Instant::now(),
    );
    // The switch hands its fast path over to its next start (the links pinned as the
    // ports open, a deadline kept ahead); what a predecessor handed over (its learned
    // addresses) is taken before the ports open, whose programs then replace the
    // predecessor's in its links.
    let handover = handover(fast.is_some(), &cfg.io);
    if let Some(n) = fast.as_mut().and_then(|f| f.adopt(&mut sw)) {
        tracing::info!(
            macs = n,
            "fast path: taking over from this switch's last start"
        );
    }
    let program = fast
        .as_ref()
        .map(|f| move |k: u32, xsk: i32| f.fp.program(k, xsk));
    // (A switch port takes frames for every MAC.)
    let (ports, fast_off) = open_l2_ports(
        &names,
        &cfg.io,
        off.as_ref(),
        program
            .as_ref()
            .map(|p| p as &dyn Fn(u32, i32) -> std::io::Result<std::os::fd::OwnedFd>),
        umems.as_mut(),
    )?;
    // Frames bound to a port whose device takes no XDP frames go through the hand-off to
    // tcx where every port's hook runs it.
    if let Some(f) = &mut fast {
        f.set_handoff(ports.iter().all(hands_off));
        if let Some(grace) = handover {
            f.hand_over(grace);
        }
    }
    let names: Vec<&str> = cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect();
    control::run::place_ports(&cfg.io, &names);
    tracing::info!(
        ports = %cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(","),
        mode = ?cfg.cfg.mode,
        "switch running"
    );
    control::switch::run(sw, ports, control, stop, &cfg, fast, fast_off)
        .map_err(anyhow::Error::msg)?;
    let s = counters.snapshot();
    tracing::info!(dropped = s.drops.values().sum::<u64>(), "switch stopped");
    Ok(0)
}

/// Why an element whose fast path is an XDP program on each port (a switch, an Axon)
/// runs without it (None: it runs it): `[io] fast_path = false`, or `backend = "packet"`
/// with the fast path left to its default; said outright with `"packet"`, an error.
fn xdp_fast_off(
    io: &control::config::IoConfig,
    config: &Path,
    element: &str,
) -> Result<Option<String>> {
    if !io.fast_path {
        return Ok(Some("[io] fast_path = false".into()));
    }
    if io.backend == io::Backend::Packet {
        if io.fast_path_set {
            bail!(
                "{}: [io] fast_path of {element} runs in XDP: it needs backend = \"xdp\" or \"auto\", not \"packet\"",
                config.display()
            );
        }
        return Ok(Some(format!(
            "{element}'s fast path runs in XDP, and [io] backend = \"packet\""
        )));
    }
    Ok(None)
}

/// Opens the ports `names` of an element whose fast path is an XDP program on each port
/// (a switch, an Axon), each in promiscuous mode (the element takes frames for every
/// MAC): with `program` (port k's code, given its socket map), each with its program
/// ([`open_fast_port`]); without (`off` says why), as `[io]` says. Returns the ports and,
/// per port, why its program does not carry the fast path.
fn open_l2_ports(
    names: &[String],
    cfg: &control::config::IoConfig,
    off: Option<&String>,
    program: Option<&dyn Fn(u32, i32) -> std::io::Result<std::os::fd::OwnedFd>>,
    mut umems: Option<&mut io::Umems>,
) -> Result<(Vec<io::AnyPort>, std::collections::HashMap<String, String>)> {
    let mut fast_off: std::collections::HashMap<String, String> = off
        .map(|why| names.iter().map(|n| (n.clone(), why.clone())).collect())
        .unwrap_or_default();
    let mut ports = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let port = match program {
            Some(p) => {
                let program = |hook: io::xsk::Hook| match hook {
                    io::xsk::Hook::Xdp(xsk) => p(k as u32, xsk),
                    io::xsk::Hook::Tc => Err(io::xsk::xdp_only()),
                };
                open_fast_port(name, cfg, &program, umems.as_deref_mut(), &mut fast_off)?
            }
            None => open_port(name, cfg, umems.as_deref_mut())?.0,
        };
        io::netdev::set_promisc(name).with_context(|| format!("{name}: promiscuous mode"))?;
        ports.push(port);
    }
    Ok((ports, fast_off))
}

/// Opens port `name` of an element whose fast path is an XDP program on each port (a
/// switch, an Axon) on AF_XDP with the port's `program`. By default, on "auto", a port
/// that cannot open AF_XDP runs on AF_PACKET without it (frames still leave by it in the
/// fast path of the other ports), and `fast_off` says why.
fn open_fast_port(
    name: &str,
    cfg: &control::config::IoConfig,
    program: io::xsk::ProgramFor,
    umems: Option<&mut io::Umems>,
    fast_off: &mut std::collections::HashMap<String, String>,
) -> Result<io::AnyPort> {
    take_port(name)?;
    let ring = cfg.packet_ring;
    let xdp = io::open_workers(name, io::Backend::Xdp, ring, Some(program), 1, umems);
    let mut v = match xdp {
        Ok(v) => v,
        Err(e) if !cfg.fast_path_set && cfg.backend == io::Backend::Auto => {
            tracing::warn!(interface = %name, reason = %e, "AF_XDP unavailable; using AF_PACKET, without the fast path");
            fast_off.insert(
                name.to_string(),
                format!("AF_XDP unavailable ({e}): AF_PACKET, without the fast path"),
            );
            io::open_workers(name, io::Backend::Packet, ring, None, 1, None)?
        }
        Err(e) => return Err(e.into()),
    };
    let port = v.remove(0);
    let info = dataplane::port::Port::info(&port);
    tracing::info!(interface = %name, backend = info.backend, mode = %info.mode, fast_path = true, "port open");
    Ok(port)
}

/// Whether an element whose fast path runs (`fast`) hands it over to its next start, and
/// for how long it may forward without it (`[io] restart_grace_s`; 0: not at all); where
/// it does, the XDP links are pinned as the ports open ([`io::pin::enable`]). Only on a
/// BPF filesystem (else it says why not).
fn handover(fast: bool, io: &control::config::IoConfig) -> Option<std::time::Duration> {
    let grace = (fast && io.restart_grace_s > 0)
        .then(|| std::time::Duration::from_secs(io.restart_grace_s))
        .filter(|_| {
            let base = io::pin::base();
            let ok = io::pin::is_bpffs(&base);
            if !ok {
                tracing::info!(
                    dir = %base.display(),
                    "fast path: not handed over to the next start ([io] restart_grace_s): not a BPF filesystem (TESSERA_BPF_DIR)"
                );
            }
            ok
        });
    io::pin::enable(grace.is_some());
    grace
}

/// The flag SIGINT and SIGTERM set: the element stops cleanly.
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    Ok(stop)
}

/// An element without a fast path refuses one said outright in its `config`.
fn no_fast_path(io: &control::config::IoConfig, config: &Path) -> Result<()> {
    if io.fast_path && io.fast_path_set {
        bail!(
            "{}: [io] fast_path is for forwarders, back-ends, LBs, switches and Axons",
            config.display()
        );
    }
    Ok(())
}

pub(crate) fn axon(a: &ElementArgs) -> Result<i32> {
    let (config, control) = (a.config.as_path(), a.control.as_deref());
    let mut cfg = control::axon::AxonFile::load(config)?;
    if let Some(b) = backend_arg(a.io.as_deref())? {
        cfg.io.backend = b;
    }
    a.place(&mut cfg.io)?;
    a.fast(&mut cfg.io);
    let off = xdp_fast_off(&cfg.io, config, "the Axon")?;
    if a.dist_key_file.is_some() {
        tracing::info!("an Axon speaks no DIST: --dist-key-file is not used");
    }
    let stop = stop_on_signals()?;
    let mut umems = cfg.io.shared_umem.then(|| {
        let names: Vec<&str> = cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect();
        io::Umems::new(&names, 1)
    });
    // The fast path's maps need the ports' MACs, its programs the maps.
    for (i, p) in cfg.cfg.ports.clone().iter().enumerate() {
        cfg.cfg.macs[i] =
            wire::MacAddr(io::netdev::mac(&p.name).with_context(|| format!("port {}", p.name))?);
    }
    let mut fast = match &off {
        None => Some(control::axon::AxonFast::new(&cfg.cfg).map_err(anyhow::Error::msg)?),
        Some(_) => None,
    };
    // The Axon hands its fast path over to its next start (the links pinned as the ports
    // open, a deadline kept ahead, its neighbours asked to hold it in its last hellos);
    // what a predecessor handed over (the neighbours its programs sent to) is written to
    // this start's map before the ports open, whose programs then replace the old ones.
    let handover = handover(fast.is_some(), &cfg.io);
    let macs: Vec<[u8; 6]> = cfg.cfg.macs.iter().map(|m| m.0).collect();
    let hold = handover.unwrap_or_default();
    if let Some(n) = fast.as_mut().and_then(|f| f.adopt(&macs, hold)) {
        tracing::info!(
            neighbours = n,
            "fast path: taking over from this Axon's last start"
        );
    }
    let names: Vec<String> = cfg.cfg.ports.iter().map(|p| p.name.clone()).collect();
    let program = fast
        .as_ref()
        .map(|f| move |k: u32, xsk: i32| f.fp.program(k, xsk));
    // (A host port takes frames for every MAC: the far hosts'.)
    let (ports, fast_off) = open_l2_ports(
        &names,
        &cfg.io,
        off.as_ref(),
        program
            .as_ref()
            .map(|p| p as &dyn Fn(u32, i32) -> std::io::Result<std::os::fd::OwnedFd>),
        umems.as_mut(),
    )?;
    // Frames bound to an Axon link whose device takes no XDP frames go through the
    // hand-off to tcx where every port's hook runs it.
    let mut handed = false;
    if let Some(f) = &mut fast {
        f.set_handoff(ports.iter().all(hands_off));
        if let Some(grace) = handover {
            handed = f.hand_over(grace);
        }
    }
    let names: Vec<&str> = cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect();
    control::run::place_ports(&cfg.io, &names);
    let names = cfg.cfg.ports.iter().map(|p| p.name.clone()).collect();
    let counters = Arc::new(dataplane::Counters::for_role(
        names,
        dataplane::counters::Scope::Axon,
    ));
    let mut ax =
        dataplane::axon::Axon::new(cfg.cfg.clone(), counters.clone(), std::time::Instant::now());
    ax.farewell_hold = handover.filter(|_| handed);
    if let Some(f) = fast.as_ref().filter(|f| !f.adopted_ports().is_empty()) {
        let now = std::time::Instant::now();
        ax.settle(f.adopted_ports(), now + hold, now);
    }
    tracing::info!(
        id = cfg.cfg.id,
        ports = %cfg.cfg.ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(","),
        "axon running"
    );
    control::axon::run(ax, ports, control, stop, &cfg, fast, fast_off)
        .map_err(anyhow::Error::msg)?;
    let s = counters.snapshot();
    tracing::info!(dropped = s.drops.values().sum::<u64>(), "axon stopped");
    Ok(0)
}

pub(crate) fn controller(a: &ElementArgs) -> Result<i32> {
    let (config, control) = (a.config.as_path(), a.control.as_deref());
    let mut cfg = control::vcp::ControllerFile::load(config)?;
    if let Some(b) = backend_arg(a.io.as_deref())? {
        cfg.io.backend = b;
    }
    a.place(&mut cfg.io)?;
    a.dist(&mut cfg.dist, "controller")?;
    no_fast_path(&cfg.io, config)?;
    let stop = stop_on_signals()?;
    let (port, link) = open_port(&cfg.interface, &cfg.io, None)?;
    tracing::info!(interface = %cfg.interface, mac = %link.mac, "controller running");
    control::vcp::run(&cfg, port, link.mac, control, stop).map_err(anyhow::Error::msg)?;
    tracing::info!("controller stopped");
    Ok(0)
}
