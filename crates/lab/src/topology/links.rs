//! A lab's wiring as `Lab::up` makes it: the switches' bridges, the links' veth pairs
//! (wire-like, GRO on where an XDP program redirects to them) and the hosts' addresses and
//! routes.

use super::*;

impl Lab {
    /// Each switch's bridge, a plain Ethernet switch.
    pub(super) fn make_switches(&self) -> Result<(), String> {
        for s in &self.topo.switch {
            let ns = self.ns(&s.name);
            ip_n(
                &ns,
                &["link", "add", "br0", "type", "bridge", "stp_state", "0"],
            )?;
            ip_n(&ns, &["link", "set", "br0", "up"])?;
            // A lab switch is a plain Ethernet switch: where the host loaded br_netfilter,
            // bridged frames would also cross the namespace's iptables hooks (and cost
            // every frame through the interconnection their time).
            in_ns(
                &ns,
                "sh",
                &[
                    "-c",
                    "for f in /proc/sys/net/bridge/bridge-nf-call-*; do [ -e \"$f\" ] && echo 0 > \"$f\"; done; true",
                ],
            )?;
        }
        Ok(())
    }

    /// Link `i`: a veth pair between its ends, wire-like (see below), GRO on where an XDP
    /// program redirects to it.
    pub(super) fn make_link(&self, i: usize, l: &Link) -> Result<(), String> {
        let ends: Vec<(String, String, bool)> = [&l.a, &l.b]
            .iter()
            .map(|end| match end.split_once(':') {
                Some((n, ifn)) => (n.to_string(), ifn.to_string(), false),
                None => (end.to_string(), format!("p{i}"), true),
            })
            .collect();
        let (na, ia, _) = &ends[0];
        let (nb, ib, _) = &ends[1];
        let (nsa, nsb) = (self.ns(na), self.ns(nb));
        let q = l.queues.unwrap_or(1).to_string();
        // Each end's interface index differs from its peer's: the kernel takes a
        // link whose index equals the one it names as its link (every namespace
        // numbers its interfaces from 1, so a veth's two ends often would) for a
        // plain device and reports its carrier up to a second late, and until then
        // the device's queue drops what the host sends (every lab waited most of a
        // second for its links). Unique in the lab, and clear of what a namespace
        // numbers itself (lo, br0).
        let (xa, xb) = (
            (LINK_IFINDEX_BASE + 2 * i).to_string(),
            (LINK_IFINDEX_BASE + 2 * i + 1).to_string(),
        );
        cmd::run(
            "ip",
            &[
                "link",
                "add",
                ia,
                "netns",
                &nsa,
                "index",
                &xa,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                ib,
                "netns",
                &nsb,
                "index",
                &xb,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
            ],
        )?;
        let mtu = l.mtu.unwrap_or(1500).to_string();
        for ((node, ifn, is_switch), fixed) in ends.iter().zip([&l.a_mac, &l.b_mac]) {
            let ns = self.ns(node);
            let mac = fixed.clone().unwrap_or_else(|| self.mac(node, ifn));
            ip_n(&ns, &["link", "set", ifn, "address", &mac, "mtu", &mtu])?;
            // Wire-like links: no segmentation or receive aggregation, every frame
            // with its checksums complete (on a wire a frame always is: a NIC fills
            // them before it sends; a veth would hand the far end a socket buffer
            // whose TCP or UDP checksum is left to offload, which an XDP program
            // cannot complete and must leave to user space), and an 802.1Q tag
            // travels in the frame (a tag the kernel took out of the frame into
            // socket-buffer metadata would be invisible to an XDP program on the far
            // end: a bridge untags what it receives and, with transmit VLAN offload
            // on, hands the tag to the veth beside the frame).
            // A host with `offloads` keeps a new veth's checksum offload, TSO and GSO.
            let host = self.topo.host.iter().find(|h| &h.name == node);
            let offloads = host.is_some_and(|h| h.offloads == Some(true) || self.host_offloads);
            let off: &[&str] = if offloads {
                &["-K", ifn, "gro", "off", "txvlan", "off", "rxvlan", "off"]
            } else {
                &[
                    "-K", ifn, "tx", "off", "tso", "off", "gso", "off", "gro", "off", "txvlan",
                    "off", "rxvlan", "off",
                ]
            };
            in_ns(&ns, "ethtool", off)?;
            if *is_switch {
                ip_n(&ns, &["link", "set", ifn, "master", "br0"])?;
            }
            ip_n(&ns, &["link", "set", ifn, "up"])?;
            // GRO turned on once the port is up: that is when a veth starts its NAPI
            // for it (measured here: turned on while down, the port showed GRO on and
            // still dropped the frames redirected to it).
            // Unless `--fast-path false`, on every switch port and host interface: the
            // elements' XDP programs (their fast path, on by default) redirect frames
            // to their peers, which a veth takes only while its peer runs NAPI (the
            // elements would otherwise send those frames from user space: see
            // io::egress). Not with `--io packet`: the fast path is then tcx's, whose
            // socket buffers need no NAPI on the far end, and hosts keep their
            // wire-like receive (the demo compares TCP with the kernel's on the same
            // hosts).
            let is_host = host.is_some_and(|h| h.gro != Some(false) && !self.plain_hosts);
            let xdp_fast = self.fast_path != Some(false) && self.io.as_deref() != Some("packet");
            if (*is_switch && self.topo.switch.iter().any(|s| &s.name == node && s.gro))
                || (xdp_fast && (*is_switch || is_host))
            {
                in_ns(&ns, "ethtool", &["-K", ifn, "gro", "on"])?;
            }
        }
        Ok(())
    }

    /// Each host's queues, addresses, IPv6 autoconfiguration and routes.
    pub(super) fn configure_hosts(&self) -> Result<(), String> {
        for h in &self.topo.host {
            let ns = self.ns(&h.name);
            for i in &h.interfaces {
                if i.name != "lo" {
                    self.host_queue(&ns, &i.name)?;
                }
                if let Some(a) = &i.address {
                    ip_n(&ns, &["addr", "add", a, "dev", &i.name])?;
                }
                if let Some(a) = &i.address6 {
                    ip_n(&ns, &["-6", "addr", "add", a, "dev", &i.name, "nodad"])?;
                }
                if i.slaac {
                    let k = format!("net.ipv6.conf.{}", i.name);
                    in_ns(
                        &ns,
                        "sysctl",
                        &[
                            "-qw",
                            &format!("{k}.accept_ra=1"),
                            &format!("{k}.autoconf=1"),
                            &format!("{k}.dad_transmits=0"),
                        ],
                    )?;
                }
            }
            for r in &h.routes {
                // A route through an IPv6 gateway (or to an IPv6 prefix) is an IPv6 route.
                let mut args = if r.contains(':') {
                    vec!["-6", "route", "add"]
                } else {
                    vec!["route", "add"]
                };
                args.extend(r.split_whitespace());
                ip_n(&ns, &args)?;
            }
        }
        Ok(())
    }
}
