//! The forwarder's filters (docs/filters.md): per interface, the reverse-path check and
//! the access list of what comes in, and the access list of what it forwards out.
//!
//! Where they apply: `urpf` and `acl_in` to every IPv4 and IPv6 packet received on the
//! interface that passed the header checks and is not from a martian source, the router's
//! own packets included; IPv6 neighbour discovery (ICMPv6 types 133 to 137) always passes
//! `acl_in`, and packets from a link-local or the unspecified address pass `urpf` (they
//! never cross a router). `acl_out` to every packet forwarded out of the interface, after
//! the route lookup; not to what the router itself sends.

use super::*;
use crate::acl::{Action, FilterShare, Filters, Key, Urpf};
use std::net::IpAddr;

/// What the filters decided about a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Pass,
    /// Dropped and counted with this reason.
    Drop(Drop),
    /// Dropped, counted, and answered with administratively prohibited.
    Reject,
}

impl Forwarder {
    /// Makes `share` this worker's filters (every worker of a forwarder takes the same
    /// share; [`FilterShare::store`] changes them for all at their next batch).
    pub fn set_filters(&mut self, share: FilterShare) {
        self.filters = share;
        self.filt = None;
    }

    /// The filters every worker reads.
    pub fn filter_share(&self) -> &FilterShare {
        &self.filters
    }

    /// The filters of this batch, none where no interface filters anything.
    #[inline]
    fn filters_now(&mut self) -> Option<Arc<Filters>> {
        let f = self.filt.get_or_insert_with(|| self.filters.load());
        f.any().then(|| f.clone())
    }

    /// Whether the source `src` of a packet that came in on `iface` passes `mode`.
    fn urpf_passes(&mut self, src: IpAddr, iface: u16, mode: Urpf, allow_default: bool) -> bool {
        let (group, default): (Option<Vec<u16>>, bool) = match src {
            IpAddr::V4(a) => {
                self.load_snapshot();
                let Some((fib, groups)) = self.snap.as_ref() else {
                    return false;
                };
                let g = fib.lookup_raw(u32::from(a));
                let d = g
                    == self
                        .readers
                        .default_group
                        .load(std::sync::atomic::Ordering::Relaxed);
                (
                    (g != NO_ROUTE)
                        .then(|| {
                            groups
                                .get(g as usize)
                                .map(|h| h.iter().map(|n| n.port).collect())
                        })
                        .flatten(),
                    d,
                )
            }
            IpAddr::V6(a) => match self.urpf_group6(a) {
                Some((ifs, d)) => (Some(ifs), d),
                None => (None, false),
            },
        };
        let Some(ifaces) = group else {
            return false;
        };
        match mode {
            Urpf::Off => true,
            // Strict: the default route counts as any other (it is the best route).
            Urpf::Strict => ifaces.contains(&iface),
            Urpf::Loose => allow_default || !default,
        }
    }

    /// The checks of what comes in on `iface`: the packet `ip` (its header checked), of
    /// `bytes` bytes.
    pub(super) fn filter_in(&mut self, ip: &[u8], v6: bool, iface: u16, bytes: usize) -> Verdict {
        let Some(f) = self.filters_now() else {
            return Verdict::Pass;
        };
        let b = f.binding(iface);
        if b.acl_in.is_none() && b.urpf == Urpf::Off {
            return Verdict::Pass;
        }
        let key = if v6 {
            Key::of_ipv6(ip)
        } else {
            Key::of_ipv4(ip)
        };
        let Some(key) = key else {
            return Verdict::Pass; // the checks after these drop it, counted
        };
        if b.urpf != Urpf::Off && !exempt_from_urpf(key.src) {
            let ok = self.urpf_passes(key.src, iface, b.urpf, b.urpf_allow_default);
            if !ok {
                if let Some(d) = f.drops.get(iface as usize) {
                    d.urpf.add(1, bytes as u64);
                }
                return Verdict::Drop(match b.urpf {
                    Urpf::Strict => Drop::UrpfStrict,
                    _ => Drop::UrpfLoose,
                });
            }
        }
        let Some(list) = b.acl_in else {
            return Verdict::Pass;
        };
        if v6 && key.protocol == 58 && key.icmp.is_some_and(|(t, _)| (133..=137).contains(&t)) {
            return Verdict::Pass; // neighbour discovery
        }
        let v = verdict(f.decide(list, &key, bytes).action);
        if v != Verdict::Pass {
            if let Some(d) = f.drops.get(iface as usize) {
                d.acl_in.add(1, bytes as u64);
            }
        }
        v
    }

    /// The access list of what leaves by `iface`: the packet `ip` as it came in.
    pub(super) fn filter_out(&mut self, ip: &[u8], v6: bool, iface: u16, bytes: usize) -> Verdict {
        let Some(f) = self.filters_now() else {
            return Verdict::Pass;
        };
        let Some(list) = f.binding(iface).acl_out else {
            return Verdict::Pass;
        };
        let key = if v6 {
            Key::of_ipv6(ip)
        } else {
            Key::of_ipv4(ip)
        };
        let Some(key) = key else {
            return Verdict::Pass;
        };
        let v = verdict(f.decide(list, &key, bytes).action);
        if v != Verdict::Pass {
            if let Some(d) = f.drops.get(iface as usize) {
                d.acl_out.add(1, bytes as u64);
            }
        }
        v
    }

    /// Acts on a verdict other than [`Verdict::Pass`] about the IPv4 packet in `p`.
    pub(super) fn filtered4(
        &mut self,
        p: Pkt,
        v: Verdict,
        l2_group: bool,
        now: Instant,
        tx: &mut TxQueues,
    ) {
        let in_port = p.meta.iface;
        match v {
            Verdict::Pass => {}
            Verdict::Drop(d) => {
                let why = flow_status(d);
                let (ip, len) = (&p.data[ETH..], p.data.len());
                self.sample(ip, false, in_port, None, None, len, why);
                self.drop_pkt(p, d)
            }
            Verdict::Reject => {
                let e = IcmpError::Unreachable(unreachable::ADMIN_PROHIBITED);
                self.icmp_error(&p.data[ETH..], l2_group, in_port, e, now, tx);
                self.drop_pkt(p, Drop::AclReject)
            }
        }
    }
}

/// Sources no reverse-path check looks at: IPv6 link-local and unspecified ones.
fn exempt_from_urpf(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(_) => false,
        IpAddr::V6(a) => a.is_unspecified() || wire::ipv6::is_link_local(a),
    }
}

/// A filter's drop as IPFIX's `forwardingStatus` says it.
pub(super) fn flow_status(d: Drop) -> u8 {
    match d {
        Drop::UrpfStrict | Drop::UrpfLoose => wire::ipfix::status::DROPPED_RPF,
        _ => wire::ipfix::status::DROPPED_ACL_DENY,
    }
}

fn verdict(a: Action) -> Verdict {
    match a {
        Action::Permit => Verdict::Pass,
        Action::Deny => Verdict::Drop(Drop::AclDeny),
        Action::Reject => Verdict::Reject,
    }
}
