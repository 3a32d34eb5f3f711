//! Whether frames an XDP program redirects can leave by an interface, and a watch that
//! follows it while an element runs.
//!
//! An XDP program that redirects a frame to a device hands it to the device's
//! `ndo_xdp_xmit`. A driver without one drops it; so does a veth whose peer runs no NAPI
//! (neither an XDP program nor GRO on the far end, as on links set up to behave like
//! wires, and in many container setups), and the frame is counted only in the device's
//! `tx_dropped`. The kernel says which devices take them: the `netdev` generic netlink
//! family's `xdp-features` of the device carry `NDO_XMIT` when it does, and a veth
//! updates its own whenever its peer's XDP program, GRO or state changes, with a
//! notification to the family's `mgmt` group.
//!
//! The fast paths do not redirect to a port whose device refuses such frames
//! ([`EgressWatch`] follows each port): they hand its frames, ready to leave, to the tcx
//! hook of the port they came in by, which sends them as socket buffers
//! ([`crate::handoff`]); where the kernel has no tcx, they go to user space, which sends
//! them through its socket.

use crate::genl::{attr, attrs, Genl};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
/// `NETDEV_XDP_ACT_NDO_XMIT`: the device takes frames redirected to it in XDP.
pub const XDP_ACT_NDO_XMIT: u64 = 1 << 2;

/// Whether frames redirected in XDP can leave by a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Egress {
    /// The device takes them.
    Ready,
    /// It would drop them; why.
    Refused(String),
    /// The kernel does not say (a kernel before 6.3): taken as ready; why unknown.
    Unknown(String),
}

impl Egress {
    /// Whether a fast path may redirect frames to the device.
    pub fn ok(&self) -> bool {
        !matches!(self, Egress::Refused(_))
    }

    /// What `show interfaces` says of it: none when ready.
    pub fn why(&self) -> Option<&str> {
        match self {
            Egress::Ready => None,
            Egress::Refused(w) | Egress::Unknown(w) => Some(w),
        }
    }
}

/// What the kernel says of the device `name`'s XDP features (in the calling thread's
/// namespace).
pub fn xdp_features(name: &str) -> io::Result<u64> {
    let index = crate::netdev::ifindex(name)? as u32;
    let mut g = Genl::open()?;
    let fam = g.family("netdev")?;
    let mut body = Vec::new();
    attr(&mut body, NETDEV_A_DEV_IFINDEX, &index.to_ne_bytes());
    let r = g.request(fam, NETDEV_CMD_DEV_GET, false, &body)?;
    r.iter()
        .flat_map(|m| attrs(m))
        .find(|(k, _)| *k == NETDEV_A_DEV_XDP_FEATURES)
        .and_then(|(_, p)| Some(u64::from_ne_bytes(p.get(..8)?.try_into().ok()?)))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{name}: the kernel gave no xdp-features"),
            )
        })
}

/// Whether frames redirected in XDP can leave by the device `name`.
pub fn xdp_egress(name: &str) -> Egress {
    match xdp_features(name) {
        Ok(f) if f & XDP_ACT_NDO_XMIT != 0 => Egress::Ready,
        Ok(_) => Egress::Refused(match crate::netdev::driver(name).as_deref() {
            Ok("veth") => "its veth peer runs no NAPI (no XDP program and GRO off there): frames redirected to it would be lost".into(),
            Ok(d) => format!("its driver ({d}) cannot send frames redirected in XDP (no ndo_xdp_xmit)"),
            Err(_) => "the device cannot send frames redirected in XDP".into(),
        }),
        Err(e) => Egress::Unknown(format!("the kernel does not say whether it takes frames redirected in XDP ({e}); taken as ready")),
    }
}

/// Why a port of an element with a fast path is better on AF_PACKET, its fast path in
/// tcx, than on AF_XDP: its device is a veth whose peer runs no NAPI (no XDP program, GRO
/// off: a container's end, a wire-like host's). Such a peer sends socket buffers, and an
/// XDP program on this end would have the veth take each through NAPI and copy it into a
/// page with XDP's headroom before the program sees it; the tcx program takes the buffer
/// as it is. Measured on the 2-core machine (docs/forwarder.md, "Ports on AF_PACKET by
/// choice"): the kernel's own round trip grows by a fifth with an empty XDP program on
/// such ports, and the forwarder's rate through them is higher in tcx. None where the
/// device takes XDP frames or is not a veth (a NIC's driver runs XDP natively).
pub fn socket_buffers_only(name: &str) -> Option<String> {
    match (xdp_egress(name), crate::netdev::driver(name).as_deref()) {
        (Egress::Refused(_), Ok("veth")) => Some("its veth peer runs no NAPI (no XDP program, GRO off): it sends socket buffers, which an XDP program here would have copied first".into()),
        _ => None,
    }
}

/// One port as the watch last found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortEgress {
    pub name: String,
    pub egress: Egress,
    /// How many times its state changed since the element started.
    pub changes: u64,
    /// Of those, how many a look woken by the kernel's notification found (the others,
    /// the timed look every second).
    pub notified_changes: u64,
}

/// Follows whether each of an element's ports takes frames redirected in XDP, and tells the
/// element's fast path when that changes.
pub struct EgressWatch {
    state: Arc<Mutex<Vec<PortEgress>>>,
}

/// How often the watch looks again without a notification (one may be lost, or a driver
/// may not send one).
const EVERY: Duration = Duration::from_secs(1);

impl EgressWatch {
    /// Checks every port of `names` now and calls `apply(port, ok)` for each, then goes on
    /// watching on a thread of its own until `stop`: on each `netdev` notification and
    /// every second, it calls `apply` again for each port whose state changed, and logs
    /// the change. Must be called from a thread of the ports' namespace.
    pub fn start(
        names: &[String],
        stop: Arc<AtomicBool>,
        mut apply: impl FnMut(usize, bool) + Send + 'static,
    ) -> EgressWatch {
        let first: Vec<PortEgress> = names
            .iter()
            .map(|n| PortEgress {
                name: n.clone(),
                egress: xdp_egress(n),
                changes: 0,
                notified_changes: 0,
            })
            .collect();
        for (i, p) in first.iter().enumerate() {
            apply(i, p.egress.ok());
            if let Some(why) = p.egress.why() {
                // Said of XDP alone: a port whose fast path runs in tcx sends its frames
                // as socket buffers, which such a device takes.
                tracing::info!(interface = %p.name, xdp_redirect_egress = p.egress.ok(), why, "fast path egress: where this port's fast path runs in XDP, frames bound out of it go through the hand-off to tcx (or user space where the kernel has no tcx)");
            }
        }
        let state = Arc::new(Mutex::new(first));
        let st = state.clone();
        let spawned = std::thread::Builder::new()
            .name("fast-path-egress".into())
            .spawn(move || {
                // Notifications where the kernel sends them; the timed look either way.
                let mut listen = Genl::open().and_then(|mut g| {
                    let id = g.group("netdev", "mgmt")?;
                    g.join(id)?;
                    Ok(g)
                });
                while !stop.load(Ordering::Relaxed) {
                    let notified = match &mut listen {
                        Ok(g) => match g.wait_notification(EVERY) {
                            Ok(n) => n,
                            Err(_) => {
                                std::thread::sleep(EVERY);
                                false
                            }
                        },
                        Err(_) => {
                            std::thread::sleep(EVERY);
                            false
                        }
                    };
                    let names: Vec<String> = match st.lock() {
                        Ok(s) => s.iter().map(|p| p.name.clone()).collect(),
                        Err(_) => return,
                    };
                    for (i, n) in names.iter().enumerate() {
                        let now = xdp_egress(n);
                        let Ok(mut s) = st.lock() else { return };
                        let p = &mut s[i];
                        if p.egress.ok() != now.ok() {
                            p.changes += 1;
                            p.notified_changes += notified as u64;
                            tracing::info!(
                                interface = %n,
                                fast_path_egress = now.ok(),
                                why = now.why().unwrap_or("the device takes frames redirected in XDP"),
                                "fast path egress changed"
                            );
                            apply(i, now.ok());
                        }
                        p.egress = now;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "fast path: no thread to watch the ports' egress");
        }
        EgressWatch { state }
    }

    /// Every port as last found.
    pub fn ports(&self) -> Vec<PortEgress> {
        self.state.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_ns::Netns;

    fn sh(ns: &Netns, args: &[&str]) {
        let o = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.0])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {o:?}");
    }

    #[test]
    fn a_veth_takes_redirects_only_while_its_peer_runs_napi() {
        let ns = Netns::with_veth("egress");
        sh(&ns, &["ethtool", "-K", "ub", "gro", "off"]);
        let e = ns.run(|| xdp_egress("ua"));
        assert!(!e.ok(), "{e:?}");
        assert!(e.why().unwrap().contains("veth peer runs no NAPI"), "{e:?}");
        // GRO on at the far end: its NAPI runs, and redirected frames are taken.
        sh(&ns, &["ethtool", "-K", "ub", "gro", "on"]);
        assert_eq!(ns.run(|| xdp_egress("ua")), Egress::Ready);
        assert!(ns.run(|| xdp_egress("nope")).ok(), "unknown, not refused");

        // The watch finds the state at start and follows its changes.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, st2) = (seen.clone(), stop.clone());
        let w = ns.run(move || {
            EgressWatch::start(&["ua".to_string()], st2, move |i, ok| {
                s2.lock().unwrap().push((i, ok));
            })
        });
        assert_eq!(*seen.lock().unwrap(), vec![(0, true)]);
        sh(&ns, &["ethtool", "-K", "ub", "gro", "off"]);
        let t = std::time::Instant::now();
        while seen.lock().unwrap().len() < 2 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(*seen.lock().unwrap(), vec![(0, true), (0, false)]);
        let ports = w.ports();
        assert_eq!(ports[0].changes, 1);
        assert!(!ports[0].egress.ok());
        // The kernel's notification, which wakes the watch at once: checked apart, since
        // on a busy machine the timed look can find a change before the notification is
        // read (a time bound, then the count of changes found by notification, both
        // failed so).
        let notified = ns.run(|| {
            let mut g = Genl::open().unwrap();
            let id = g.group("netdev", "mgmt").unwrap();
            g.join(id).unwrap();
            let o = std::process::Command::new("ethtool")
                .args(["-K", "ub", "gro", "on"])
                .output()
                .unwrap();
            assert!(o.status.success(), "{o:?}");
            g.wait_notification(Duration::from_secs(5)).unwrap()
        });
        assert!(
            notified,
            "no netdev notification when the peer's GRO turned on"
        );
    }
}
