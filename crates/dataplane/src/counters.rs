//! Counters: per-port traffic, one counter per drop reason, and named events.
//!
//! Each counter has exactly one writer (the worker that owns it), so an increment is a
//! relaxed load and store with no locked instruction; readers (the control socket) may see a
//! value a few packets old, never a torn one.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A single-writer counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($v:ident = $s:literal : $d:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($v,)* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v,)*];
            pub const COUNT: usize = $name::ALL.len();
            /// The counter's name, as `show counters` prints it.
            pub fn name(self) -> &'static str { match self { $($name::$v => $s,)* } }
            /// One line saying what the counter counts.
            pub fn description(self) -> &'static str { match self { $($name::$v => $d,)* } }
        }
    };
}

named_enum! {
    /// Why a frame was dropped. Every drop anywhere in the data plane has one of these.
    Drop {
        RxOversize = "rx_oversize": "frame larger than a packet buffer (or truncated by the ring)",
        EthTruncated = "eth_truncated": "frame shorter than its Ethernet header",
        NotOurMac = "eth_not_our_mac": "unicast frame addressed to another station's MAC",
        VlanNotConfigured = "eth_vlan_not_configured": "802.1Q-tagged frame on a port without VLANs",
        EthertypeUnsupported = "eth_unsupported_ethertype": "neither IPv4 nor ARP (IPv6 included)",
        ArpMalformed = "arp_malformed": "ARP too short, not Ethernet/IPv4, or unknown operation",
        ArpNotForUs = "arp_not_for_us": "ARP for another address, from a sender we do not know",
        ArpQueueFull = "arp_queue_full": "packet arrived while its next hop was resolving and the queue was full",
        ArpTableFull = "arp_table_full": "next hop not in the neighbour table and the table is full",
        ArpFailed = "arp_resolution_failed": "next hop did not answer ARP; queued packet dropped",
        Ip4Truncated = "ip4_truncated": "buffer shorter than the IPv4 header or total length",
        Ip4BadVersion = "ip4_bad_version": "IP version is not 4",
        Ip4BadHeaderLen = "ip4_bad_header_len": "IHL below 5",
        Ip4BadTotalLen = "ip4_bad_total_len": "total length below the header length",
        Ip4BadChecksum = "ip4_bad_checksum": "IPv4 header checksum is wrong",
        Ip4BadOptions = "ip4_bad_options": "malformed IPv4 option list",
        Ip4SourceRoute = "ip4_source_route": "source-routed packet (LSRR/SSRR); not forwarded",
        Ip4MartianSource = "ip4_martian_source": "source is 0/8, 127/8, multicast, class E, broadcast or ours",
        Ip4MartianDestination = "ip4_martian_destination": "destination is 0/8, 127/8 or class E",
        Ip4L2Multicast = "ip4_l2_multicast": "link broadcast/multicast frame not for us; not forwarded (RFC 1812 5.3.4)",
        Ip4Multicast = "ip4_multicast": "IP multicast destination; multicast routing is not implemented",
        Ip4Broadcast = "ip4_broadcast": "limited or directed broadcast; not forwarded",
        Ip4TtlExpired = "ip4_ttl_expired": "TTL would reach 0; time exceeded sent",
        Ip4NoRoute = "ip4_no_route": "no route to the destination; net unreachable sent",
        Ip4FragNeeded = "ip4_frag_needed": "larger than the egress MTU with DF set; fragmentation needed sent",
        Ip4FragFailed = "ip4_frag_failed": "could not be fragmented (MTU below the header plus 8 bytes)",
        LocalFragment = "local_fragment": "fragment addressed to the router; reassembly is not implemented",
        LocalIcmpBadChecksum = "local_icmp_bad_checksum": "ICMP to the router with a wrong checksum",
        LocalIcmpOther = "local_icmp_other": "ICMP to the router that is not an echo request",
        LocalUdp = "local_udp": "UDP to the router; port unreachable sent",
        LocalTcp = "local_tcp": "TCP to the router; no TCP service",
        LocalProtocol = "local_protocol": "other protocol to the router; protocol unreachable sent",
        LocalNoRoute = "local_no_route": "reply or ICMP error the router made has no route",
        IcmpSuppressed = "icmp_error_suppressed": "ICMP error not sent: about an ICMP error, a non-first fragment, a broadcast or a bad source",
        IcmpRateLimited = "icmp_error_rate_limited": "ICMP error not sent: over the rate limit",
        TxRingFull = "tx_ring_full": "egress ring had no free slot",
        TxError = "tx_error": "the egress port reported an error",
    }
}

named_enum! {
    /// Things that happened that are not drops.
    Event {
        Forwarded = "ip4_forwarded": "packets forwarded",
        ChecksumFilled = "ip4_checksum_filled": "TCP/UDP checksums filled in for frames whose sender left them to offload",
        Fragmented = "ip4_fragmented": "packets fragmented",
        FragmentsMade = "ip4_fragments_made": "fragments sent",
        ArpRequestsSent = "arp_requests_sent": "ARP requests sent",
        ArpRepliesSent = "arp_replies_sent": "ARP replies sent for our addresses",
        ArpLearned = "arp_learned": "neighbour entries created or refreshed",
        ArpQueued = "arp_queued": "packets queued while their next hop resolved",
        EchoReplies = "icmp_echo_replies_sent": "echo replies sent for our addresses",
        IcmpErrorsSent = "icmp_errors_sent": "ICMP error messages sent",
    }
}

/// Traffic counters of one port.
#[derive(Debug, Default)]
pub struct PortCounters {
    pub rx_packets: Counter,
    pub rx_bytes: Counter,
    pub tx_packets: Counter,
    pub tx_bytes: Counter,
}

/// All counters of one element.
#[derive(Debug)]
pub struct Counters {
    pub port_names: Vec<String>,
    pub ports: Vec<PortCounters>,
    drops: Vec<Counter>,
    events: Vec<Counter>,
}

impl Counters {
    pub fn new(port_names: Vec<String>) -> Counters {
        Counters {
            ports: port_names.iter().map(|_| PortCounters::default()).collect(),
            port_names,
            drops: (0..Drop::COUNT).map(|_| Counter::default()).collect(),
            events: (0..Event::COUNT).map(|_| Counter::default()).collect(),
        }
    }

    #[inline]
    pub fn count(&self, d: Drop) {
        self.drops[d as usize].inc();
    }

    #[inline]
    pub fn count_n(&self, d: Drop, n: u64) {
        self.drops[d as usize].add(n);
    }

    #[inline]
    pub fn event(&self, e: Event) {
        self.events[e as usize].inc();
    }

    #[inline]
    pub fn event_n(&self, e: Event, n: u64) {
        self.events[e as usize].add(n);
    }

    pub fn drops(&self, d: Drop) -> u64 {
        self.drops[d as usize].get()
    }

    pub fn events(&self, e: Event) -> u64 {
        self.events[e as usize].get()
    }

    /// A consistent-enough copy for printing.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            interfaces: self
                .port_names
                .iter()
                .zip(&self.ports)
                .map(|(n, c)| {
                    (
                        n.clone(),
                        PortSnapshot {
                            rx_packets: c.rx_packets.get(),
                            rx_bytes: c.rx_bytes.get(),
                            tx_packets: c.tx_packets.get(),
                            tx_bytes: c.tx_bytes.get(),
                        },
                    )
                })
                .collect(),
            drops: Drop::ALL
                .iter()
                .map(|d| (d.name().to_string(), self.drops(*d)))
                .collect(),
            events: Event::ALL
                .iter()
                .map(|e| (e.name().to_string(), self.events(*e)))
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PortSnapshot {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

/// Counters as `tessera show counters` prints them.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Snapshot {
    pub interfaces: BTreeMap<String, PortSnapshot>,
    pub drops: BTreeMap<String, u64>,
    pub events: BTreeMap<String, u64>,
}

/// Every counter name with its description, for `tessera show counters --describe`.
pub fn descriptions() -> BTreeMap<&'static str, &'static str> {
    Drop::ALL
        .iter()
        .map(|d| (d.name(), d.description()))
        .chain(Event::ALL.iter().map(|e| (e.name(), e.description())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_described() {
        let d = descriptions();
        assert_eq!(d.len(), Drop::COUNT + Event::COUNT);
        assert!(d.values().all(|s| !s.is_empty()));
    }

    #[test]
    fn snapshot_reads_counts() {
        let c = Counters::new(vec!["a".into()]);
        c.count(Drop::Ip4BadChecksum);
        c.count_n(Drop::Ip4BadChecksum, 2);
        c.ports[0].rx_packets.add(5);
        let s = c.snapshot();
        assert_eq!(s.drops["ip4_bad_checksum"], 3);
        assert_eq!(s.interfaces["a"].rx_packets, 5);
    }
}
