//! A forwarder's interfaces as the data plane sees them: name, MAC, MTU, IPv4 address and
//! prefix, 802.1Q sub-interfaces.

use fib::Prefix;
use std::net::Ipv4Addr;
use wire::MacAddr;

/// One port of the forwarder as the data plane sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub mac: MacAddr,
    /// IP MTU: the largest IPv4 packet sent out of this port.
    pub mtu: usize,
    /// The interface's IPv4 address; unspecified (0.0.0.0) on an IPv6-only interface,
    /// which has no IPv4 network, answers no ARP and sources nothing over IPv4.
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    /// Set for an 802.1Q sub-interface: its frames carry this tag on the parent's port.
    pub vlan: Option<Vlan>,
    /// Link speed in Mbit/s, advertised in hellos; 0 when unknown.
    pub speed_mbps: u32,
}

/// Where a VLAN sub-interface lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vlan {
    /// Index (in the forwarder's interface list) of the untagged interface of the port.
    pub parent: u16,
    /// The 802.1Q VLAN id, 1..4094.
    pub id: u16,
}

impl Iface {
    /// An untagged interface with an IP MTU of 1500.
    pub fn new(name: &str, mac: MacAddr, addr: Ipv4Addr, prefix_len: u8) -> Iface {
        Iface {
            name: name.to_string(),
            mac,
            mtu: 1500,
            addr,
            prefix_len,
            vlan: None,
            speed_mbps: 0,
        }
    }

    /// The interface's IPv4 address, none on an IPv6-only interface.
    pub fn v4(&self) -> Option<Ipv4Addr> {
        (!self.addr.is_unspecified()).then_some(self.addr)
    }

    /// The IPv4 network the interface is on (none on an IPv6-only interface).
    pub(crate) fn net(&self) -> Option<Prefix> {
        self.v4().map(|a| Prefix::new(a, self.prefix_len))
    }

    /// The directed broadcast address of the subnet (none for /31 and /32, nor on an
    /// IPv6-only interface).
    pub fn broadcast(&self) -> Option<Ipv4Addr> {
        (self.prefix_len < 31 && self.v4().is_some())
            .then(|| Ipv4Addr::from(u32::from(self.addr) | !fib::mask(self.prefix_len)))
    }
}
