//! Counters: per-port traffic, one counter per drop reason, and named events.
//!
//! Each counter has exactly one writer (the worker that owns it), so an increment is a
//! relaxed load and store with no locked instruction; readers (the control socket) may see a
//! value a few packets old, never a torn one.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

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
    ($(#[$m:meta])* $name:ident { $($v:ident = $s:literal in $scope:ident : $d:literal,)* }) => {
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
            /// Which roles count it.
            pub fn scope(self) -> Scope { match self { $($name::$v => Scope::$scope,)* } }
        }
    };
}

named_enum! {
    /// Why a frame was dropped. Every drop anywhere in the data plane has one of these.
    Drop {
        RxOversize = "rx_oversize" in All: "frame larger than a packet buffer (or truncated by the ring)",
        EthTruncated = "eth_truncated" in All: "frame shorter than its Ethernet header",
        NotOurMac = "eth_not_our_mac" in All: "unicast frame addressed to another station's MAC",
        VlanNotConfigured = "eth_vlan_not_configured" in All: "802.1Q-tagged frame with a VLAN id the port does not carry (any tag, on an LB's external port)",
        EthertypeUnsupported = "eth_unsupported_ethertype" in Forwarder: "neither IPv4, ARP nor IPv6 (IPv6 too where no interface has an IPv6 address)",
        Ip6Malformed = "ip6_malformed" in Forwarder: "IPv6 packet shorter than its header or payload length, not version 6, or with extension headers that do not parse",
        Ip6BadSource = "ip6_bad_source" in Forwarder: "IPv6 packet from a multicast address or one of the router's own",
        Ip6Multicast = "ip6_multicast" in Forwarder: "IPv6 packet to a multicast group the router does not listen to, or in a link-layer multicast (not forwarded)",
        Ip6BeyondScope = "ip6_beyond_scope" in Forwarder: "IPv6 packet to or from a link-local (or from the unspecified) address, not forwarded off its link",
        Ip6HopLimitExceeded = "ip6_hop_limit_exceeded" in Forwarder: "IPv6 hop limit would reach 0; time exceeded sent",
        Ip6NoRoute = "ip6_no_route" in Forwarder: "no IPv6 route to the destination; destination unreachable sent",
        Ip6TooBig = "ip6_too_big" in Forwarder: "IPv6 packet larger than the outgoing link's MTU; packet too big sent",
        Ip6LocalOther = "ip6_local_other" in Forwarder: "IPv6 packet to the router that is not neighbour discovery or an echo request",
        Nd6Invalid = "nd6_invalid" in Forwarder: "neighbour discovery message that fails RFC 4861's checks (hop limit, target, options)",
        Nd6NotForUs = "nd6_not_for_us" in Forwarder: "neighbor solicitation for an address that is not the router's",
        Nd6RouterSolicitRaOff = "nd6_router_solicit_ra_off" in Forwarder: "router solicitation on an interface without router_advertisements",
        Nd6QueueFull = "nd6_queue_full" in Forwarder: "IPv6 packet arrived while its next hop was resolving and the queue was full",
        Nd6TableFull = "nd6_table_full" in Forwarder: "IPv6 packet to a next hop not resolved: the neighbour table was full",
        Nd6Failed = "nd6_failed" in Forwarder: "IPv6 packet queued for a next hop that never answered; address unreachable sent",
        ArpMalformed = "arp_malformed" in All: "ARP too short, not Ethernet/IPv4, or unknown operation",
        ArpNotForUs = "arp_not_for_us" in Forwarder: "ARP for another address, from a sender we do not know",
        ArpQueueFull = "arp_queue_full" in Forwarder: "packet arrived while its next hop was resolving and the queue was full",
        ArpTableFull = "arp_table_full" in Forwarder: "next hop not in the neighbour table and the table is full",
        ArpFailed = "arp_resolution_failed" in Forwarder: "next hop did not answer ARP; queued packet dropped",
        Ip4Truncated = "ip4_truncated" in All: "buffer shorter than the IPv4 header or total length",
        Ip4BadVersion = "ip4_bad_version" in Forwarder: "IP version is not 4",
        Ip4BadHeaderLen = "ip4_bad_header_len" in Forwarder: "IHL below 5",
        Ip4BadTotalLen = "ip4_bad_total_len" in Forwarder: "total length below the header length",
        Ip4BadChecksum = "ip4_bad_checksum" in Forwarder: "IPv4 header checksum is wrong",
        Ip4BadOptions = "ip4_bad_options" in Forwarder: "malformed IPv4 option list",
        Ip4SourceRoute = "ip4_source_route" in Forwarder: "source-routed packet (LSRR/SSRR); not forwarded",
        AclDeny = "acl_deny" in All: "denied by an access list (acl_in or acl_out; `show acl` says which rule)",
        AclReject = "acl_reject" in Forwarder: "rejected by an access list: administratively prohibited sent (rate limited)",
        UrpfStrict = "urpf_strict" in Forwarder: "failed the strict reverse-path check: the source's best route leaves by another interface, or there is none",
        UrpfLoose = "urpf_loose" in Forwarder: "failed the loose reverse-path check: no route to the source (the default route counts only with urpf_allow_default)",
        Ip4MartianSource = "ip4_martian_source" in Forwarder: "source is 0/8, 127/8, multicast, class E, broadcast or ours",
        Ip4MartianDestination = "ip4_martian_destination" in Forwarder: "destination is 0/8, 127/8 or class E",
        Ip4L2Multicast = "ip4_l2_multicast" in All: "link broadcast/multicast frame not for us; not forwarded (RFC 1812 5.3.4)",
        Ip4Multicast = "ip4_multicast" in Forwarder: "IP multicast destination; multicast routing is not implemented",
        Ip4Broadcast = "ip4_broadcast" in Forwarder: "limited or directed broadcast; not forwarded",
        Ip4TtlExpired = "ip4_ttl_expired" in Forwarder: "TTL would reach 0; time exceeded sent",
        Ip4NoRoute = "ip4_no_route" in Forwarder: "no route to the destination; net unreachable sent",
        Ip4FragNeeded = "ip4_frag_needed" in Forwarder: "larger than the egress MTU with DF set; fragmentation needed sent",
        Ip4FragFailed = "ip4_frag_failed" in Forwarder: "could not be fragmented (MTU below the header plus 8 bytes)",
        ReasmOverlap = "reasm_overlap" in Forwarder: "fragment addressed to the router that overlaps another of its datagram partly: the whole datagram is dropped (counted per fragment)",
        ReasmDuplicate = "reasm_duplicate" in Forwarder: "fragment addressed to the router that repeats one already held: dropped, the datagram kept",
        ReasmMalformed = "reasm_malformed" in Forwarder: "fragment addressed to the router past 65,535 bytes, with MF and a length not a multiple of 8, or disagreeing on its datagram's length (the datagram is dropped with it)",
        ReasmTableFull = "reasm_table_full" in Forwarder: "fragment of a new datagram addressed to the router while the most datagrams are being reassembled",
        ReasmMemory = "reasm_memory" in Forwarder: "fragment addressed to the router while its bytes would pass the reassembly memory cap",
        ReasmTimeout = "reasm_timeout" in Forwarder: "fragments of a datagram addressed to the router not complete within the reassembly timeout",
        LocalIcmpBadChecksum = "local_icmp_bad_checksum" in Forwarder: "ICMP to the router with a wrong checksum",
        LocalIcmpOther = "local_icmp_other" in Forwarder: "ICMP to the router that is not an echo request",
        LocalUdp = "local_udp" in Forwarder: "UDP to the router; port unreachable sent",
        LocalTcp = "local_tcp" in Forwarder: "TCP to the router; no TCP service",
        LocalProtocol = "local_protocol" in Forwarder: "other protocol to the router; protocol unreachable sent",
        LocalNoRoute = "local_no_route" in Forwarder: "reply or ICMP error the router made has no route",
        IcmpSuppressed = "icmp_error_suppressed" in Forwarder: "ICMP error not sent: about an ICMP error, a non-first fragment, a broadcast or a bad source",
        IcmpRateLimited = "icmp_error_rate_limited" in Forwarder: "ICMP error not sent: over the rate limit",
        SlowPathShed = "slow_path_shed" in Forwarder: "frame the port's fast-path program dropped on its way to user space, over [io] slow_path_limit (to the router, TTL expiring, no route, a neighbour not resolved, a martian): shed before the copy, so that a flood of them costs the fast path little",
        RxRingFull = "rx_ring_full" in All: "frame the kernel dropped because the port's receive ring was full: the element fell behind, and the excess was shed before any work was spent on it",
        DeviceRxDropped = "device_rx_dropped" in All: "frame the interface's driver dropped on receive (its ring full or out of buffers; on a veth, frames its peer could not queue to it), from the interface's statistics (AF_PACKET ports): the element fell behind, and the excess was shed before any work was spent on it",
        DeviceTxDropped = "device_tx_dropped" in All: "frame the interface's device could not send (its queue or ring full; on a veth, frames its peer's ring could not take, those the port's fast-path program redirected to it included), from the interface's statistics: the next hop fell behind",
        XskRxDropped = "xsk_rx_dropped" in All: "frame the kernel dropped on its way to the AF_XDP socket: no free UMEM frame on the fill ring, or larger than a UMEM frame",
        XskInvalidDescs = "xsk_invalid_descs" in All: "AF_XDP descriptors the kernel rejected (receive or transmit)",
        TxRingFull = "tx_ring_full" in All: "egress ring had no free slot",
        TxError = "tx_error" in All: "the egress port reported an error",
        StarMalformed = "star_malformed" in Forwarder: "star frame (from another forwarder of a star router) too short, of an unknown version, naming no port of ours, or not carrying an IPv4 packet",
        StarNotInternal = "star_not_internal" in Forwarder: "star frame on a port that is not the star's internal port (or on a forwarder that is no star member): not accepted",
        LbStandby = "lb_standby" in Balancer: "frame the standby LB of a spare pair dropped: the active one serves the network (docs/multistage.md, \"A spare LB\")",
        DistNotInternal = "dist_not_internal" in All: "DIST frame on a port that is not internal (spoofed from outside): not accepted",
        DistMalformed = "dist_malformed" in All: "DIST frame that does not parse (bad length, field or type)",
        DistBadVersion = "dist_bad_version" in All: "DIST frame of a version this element does not speak",
        DistUnauthenticated = "dist_unauthenticated" in All: "DIST frame without a valid seal under this element's key id, where [dist] key_file requires one",
        DistForged = "dist_forged" in All: "DIST frame whose authentication tag is wrong: forged, altered, or sealed under another key",
        DistReplayed = "dist_replayed" in All: "DIST frame whose counter this element already accepted from that sender (a replay), or below its window",
        DistStale = "dist_stale" in All: "DIST frame whose counter is older than [dist] max_age_s by this element's clock (an old capture replayed, or clocks apart)",
        DistQueueFull = "dist_queue_full" in All: "DIST frame dropped: the route writer's queue, or the queue from another worker to the first, was full (the sender repeats it: hellos come again, the controller sends routes again)",
        DistFiltersRefused = "dist_filters_refused" in All: "DIST filter chunk dropped: out of place in its set, a set whose digest does not match its text, or an element (or a worker) that takes no filters from a controller (the controller sends the set again)",
        DistNoRouteWriter = "dist_no_route_writer" in Forwarder: "routes message to an element that takes no routes from a controller (not a back-end)",
        DistRejected = "dist_rejected" in Balancer: "DIST message that parsed but could not be applied (unknown port, bad role or VLAN)",
        ClassifyNoRule = "classify_no_rule" in Balancer: "frame matched no classifier rule",
        ClassifyVlanUnknown = "classify_vlan_unknown" in Balancer: "frame from the interconnection with no VLAN id of this LB's external ports (normal for broadcasts meant for another LB)",
        ExtArpNotForUs = "ext_arp_not_for_us" in Balancer: "ARP request from outside for an address that is not the router's",
        IntArpNotForUs = "int_arp_not_for_us" in Balancer: "ARP reply from outside not addressed to the router's external address",
        VcpUnknown = "vcp_unknown" in Balancer: "control or management packet with no Virtual-CP configured",
        BalanceNoBackend = "balance_no_backend" in Balancer: "no live back-end in the balancing table",
        BalanceIp4Broadcast = "balance_ip4_broadcast" in Balancer: "IP broadcast or multicast data from outside (not a routing protocol): not balanced",
        BalanceIp6Multicast = "balance_ip6_multicast" in Balancer: "IPv6 multicast data from outside (not neighbour discovery): not balanced",
        ExtNdNotForUs = "ext_nd_not_for_us" in Balancer: "neighbor solicitation from outside that is invalid or not for the router's addresses",
        LbNdMalformed = "lb_nd_malformed" in Balancer: "neighbour discovery message the LB cannot parse",
        SwitchBadSource = "switch_bad_source" in Switch: "frame with a group (multicast or broadcast) source MAC: not learned, not forwarded",
        SwitchSamePort = "switch_same_port" in Switch: "frame to a MAC learned on the port it came in by: filtered",
        SwitchBufferFull = "switch_buffer_full" in Switch: "frame that found its output queue full (tail drop)",
        AxonMalformed = "axon_malformed" in Axon: "Axon frame whose header or control message does not parse",
        AxonPathEnd = "axon_path_end" in Axon: "Axon frame whose forward path was used up before it reached a host or a control plane",
        AxonBadPort = "axon_bad_port" in Axon: "Axon frame whose next hop is a port this Axon does not have, or a control message sent to a host port",
        AxonPlainOnAxonPort = "axon_plain_on_axon_port" in Axon: "frame without an Axon header on a port that leads to another Axon",
        AxonBadSource = "axon_bad_source" in Axon: "host frame with a group (multicast or broadcast) source MAC",
        AxonBroadcast = "axon_broadcast" in Axon: "broadcast or multicast from a host that is neither ARP, DHCP nor neighbour discovery: the Axon floods nothing",
        AxonNoRoute = "axon_no_route" in Axon: "host frame to a MAC with no route from its port (the host has not resolved it through the Axon)",
        AxonNoPath = "axon_no_path" in Axon: "host frame whose route's far Axon cannot be reached now (no path in the topology)",
        AxonCamFull = "axon_cam_full" in Axon: "route not installed: the port's route memory and its masqueraded routes were full",
        AxonArpIgnored = "axon_arp_ignored" in Axon: "ARP or neighbour discovery from a host that needs no answer (gratuitous, duplicate address detection, or a reply nobody waits for)",
        AxonNdMalformed = "axon_nd_malformed" in Axon: "neighbour solicitation or advertisement from a host that does not parse or fails RFC 4861's checks (hop limit 255, checksum)",
        AxonBufferFull = "axon_buffer_full" in Axon: "frame that found its output queue full (tail drop)",
        AxonPacedOut = "axon_paced_out" in Axon: "host frame that found its port's pacing buffer full (the host sends faster than its frames with the Axon header fit)",
        AxonDhcpMalformed = "axon_dhcp_malformed" in Axon: "DHCP message from a host that does not parse (IPv4, UDP or DHCP)",
        AxonDhcpOff = "axon_dhcp_off" in Axon: "DHCP message from a host to an Axon without [dhcp]",
        AxonDhcpPoolFull = "axon_dhcp_pool_full" in Axon: "DHCP DISCOVER not answered: every address of the pool is leased",
        AxonDhcpIgnored = "axon_dhcp_ignored" in Axon: "DHCP message that needs no answer (for another server, INFORM, or a release of an unknown lease)",
    }
}

impl Drop {
    /// The filters' drops: access lists and reverse-path checks (docs/filters.md).
    pub const FILTERS: [Drop; 4] = [
        Drop::AclDeny,
        Drop::AclReject,
        Drop::UrpfStrict,
        Drop::UrpfLoose,
    ];
}

named_enum! {
    /// Things that happened that are not drops.
    Event {
        Forwarded = "ip4_forwarded" in Forwarder: "packets forwarded",
        FastPathForwarded = "fast_path_forwarded" in All: "frames the ports' own programs forwarded (the fast path; counted in the interfaces' packets and bytes too, not in ip4_forwarded or balance_packets)",
        Forwarded6 = "ip6_forwarded" in Forwarder: "IPv6 packets forwarded",
        Nd6SolicitsSent = "nd6_solicits_sent" in Forwarder: "neighbor solicitations sent",
        Nd6AdvertsSent = "nd6_adverts_sent" in Forwarder: "neighbor advertisements sent for the router's addresses",
        Nd6Learned = "nd6_learned" in Forwarder: "IPv6 neighbour entries created or refreshed",
        Nd6RouterAdvertsSent = "nd6_router_adverts_sent" in Forwarder: "router advertisements sent (interfaces with router_advertisements: periodic, and in answer to solicitations)",
        Reassembled = "ip4_reassembled" in Forwarder: "datagrams addressed to the router reassembled from their fragments",
        Reassembled6 = "ip6_reassembled" in Forwarder: "IPv6 packets addressed to the router reassembled from their fragments",
        Fragmented6 = "ip6_fragments_made" in Forwarder: "fragments of the router's own IPv6 packets (echo replies larger than the link) sent",
        OptionsUpdated = "ip4_options_updated" in Forwarder: "packets forwarded whose Record Route or Timestamp option got this router's address or time (or its overflow count)",
        StarSent = "star_sent" in Forwarder: "packets handed to another forwarder of the star after their lookup here",
        StarReceived = "star_received" in Forwarder: "packets another forwarder of the star looked up, sent on from here without a lookup",
        ChecksumFilled = "ip4_checksum_filled" in All: "TCP/UDP checksums filled in for frames whose sender left them to offload",
        Fragmented = "ip4_fragmented" in Forwarder: "packets fragmented",
        FragmentsMade = "ip4_fragments_made" in Forwarder: "fragments sent",
        ArpRequestsSent = "arp_requests_sent" in Forwarder: "ARP requests sent",
        ArpRepliesSent = "arp_replies_sent" in Forwarder: "ARP replies sent for our addresses",
        ArpLearned = "arp_learned" in Forwarder: "neighbour entries created or refreshed",
        ArpQueued = "arp_queued" in Forwarder: "packets queued while their next hop resolved",
        EchoReplies = "icmp_echo_replies_sent" in Forwarder: "echo replies sent for our addresses",
        IcmpErrorsSent = "icmp_errors_sent" in Forwarder: "ICMP error messages sent",
        XskTxInPlace = "xsk_tx_in_place" in All: "frames sent from the UMEM frame they were received in (AF_XDP ports sharing a UMEM: no copy in user space)",
        XskTxCopied = "xsk_tx_copied" in All: "frames copied into a UMEM frame to be sent (AF_XDP: built by the element, or received on a port of another UMEM)",
        XskRxCopied = "xsk_rx_copied" in All: "frames received while their UMEM ran low on free frames, copied to the heap so that their UMEM frames went back to the kernel at once",
        DistReceived = "dist_received" in All: "DIST messages accepted from an internal port",
        DistHellosSent = "dist_hellos_sent" in All: "DIST hellos sent",
        DistReportsSent = "dist_reports_sent" in All: "DIST counter reports sent to the controller (one per message)",
        DistFilterSets = "dist_filter_sets" in All: "filter sets from the controller received whole and handed to the thread that applies them",
        DistFilterAnswers = "dist_filter_answers" in All: "answers to the controller's filter sets sent (applied or refused, with why)",
        DistFlowConfigs = "dist_flow_configs" in Forwarder: "flow sampling settings from the controller taken (a back-end that exports flows for the router; a back-end with a `[flow_export]` of its own ignores them)",
        DistFlowRecordsSent = "dist_flow_records_sent" in Forwarder: "DIST messages of ended flows sent to the controller, which exports them as the router",
        DistRoutesReceived = "dist_routes_received" in Forwarder: "routes messages from the controller passed to the route writer",
        DistHandedToLead = "dist_handed_to_lead" in All: "DIST frames another worker of a back-end or an LB received and handed to the first worker, which checks and acts on them",
        DistRoutes6Applied = "dist_routes6_applied" in Forwarder: "IPv6 route changes from the controller applied to the IPv6 table",
        DistRoutes6Skipped = "dist_routes6_skipped" in Forwarder: "IPv6 route changes from the controller not applied: a connected prefix, a gateway on none of our networks, or IPv6 off (the route is held, as the controller's digest expects)",
        DistHellosReceived = "dist_hellos_received" in Balancer: "DIST hellos received",
        DistBalanceApplied = "dist_balance_applied" in Balancer: "DIST balance messages applied to the balancing table",
        DistPortsApplied = "dist_ports_applied" in Balancer: "DIST port configuration messages applied",
        DistVcpApplied = "dist_virtual_cp_applied" in Balancer: "DIST virtual-cp messages applied",
        ExtArpRepliesSent = "ext_arp_replies_sent" in Balancer: "ARP requests from outside for the router's addresses answered by the LB",
        IntArpRequestsOut = "int_arp_requests_out" in Balancer: "ARP requests of back-ends sent out with the LB's external MAC",
        IntArpRepliesIn = "int_arp_replies_in" in Balancer: "ARP replies from outside broadcast to the back-ends",
        ExtNdAdvertsSent = "ext_nd_adverts_sent" in Balancer: "neighbor solicitations from outside for the router's IPv6 addresses answered by the LB",
        IntNdOut = "int_nd_out" in Balancer: "neighbour discovery messages of back-ends sent out with the LB's external MAC in their link-layer options",
        IntNdAdvertsIn = "int_nd_adverts_in" in Balancer: "neighbor advertisements from outside broadcast to the back-ends",
        VcpRedirected = "vcp_redirected" in Balancer: "routing and management packets sent to the Virtual-CP",
        IntToExt = "int_to_ext" in Balancer: "frames from back-ends sent out of an external port",
        Balanced = "balance_packets" in Balancer: "data packets from outside sent to a back-end",
        SpareTakeovers = "spare_takeovers" in Balancer: "times this LB, the standby of a spare pair, took over from the active one (whose hellos stopped)",
        SpareStepDowns = "spare_stepdowns" in Balancer: "times this LB, active, stepped down for the other LB of its pair, active too and ranked higher",
        SpareReclaims = "spare_reclaims" in Balancer: "times this LB, the active one of its pair, announced the network's addresses again because the other may have taught the switches otherwise meanwhile (the other heard active too and ranked lower, heard again after it was gone, or this LB's own restart resumed)",
        SpareFarewells = "spare_farewells" in Balancer: "times this LB, the active one of its pair, stopping with no fast path handed over to its next start, told the other LB it is gone (a last hello with interval 0) so that the other took over at once",
        SpareAnnounced = "spare_announced" in Balancer: "gratuitous ARPs and unsolicited neighbour advertisements sent on becoming the active LB of a spare pair",
        SpareProbes = "spare_probes" in Balancer: "ARP requests sent to the external network's addresses on becoming the active LB of a spare pair (their answers teach the interconnection where the hosts are)",
        BackendDown = "balance_backend_down" in Balancer: "back-ends that left the table (no hello within the timeout)",
        BackendUp = "balance_backend_up" in Balancer: "back-ends that returned to the table with their hellos",
        BackendWaiting = "balance_backend_waiting" in Balancer: "back-ends held out of the table: their hellos say they hold no table from the controller yet (started or restarted)",
        SwitchLearned = "switch_learned" in Switch: "source MACs learned",
        SwitchMoved = "switch_moved" in Switch: "learned MACs seen on another port (moved)",
        SwitchTableFull = "switch_table_full" in Switch: "source MACs not learned: the table was full",
        SwitchFlooded = "switch_flooded" in Switch: "frames flooded (broadcast, multicast or unknown destination)",
        AxonNeighbourUp = "axon_neighbour_up" in Axon: "ports that found an Axon (its hellos began)",
        AxonNeighbourDown = "axon_neighbour_down" in Axon: "neighbour Axons lost (no hello for the dead interval)",
        AxonTopologyRuns = "axon_topology_runs" in Axon: "path computations (after a change of the topology)",
        AxonRouteSetups = "axon_route_setups" in Axon: "routes installed (Axon-ARP answered, or a local pair)",
        AxonRouteMasqueraded = "axon_route_masqueraded" in Axon: "routes installed beyond a full route memory: the host was given a masqueraded MAC carrying the route's index",
        AxonArpRequests = "axon_arp_requests" in Axon: "Axon-ARP requests sent for a host's ARP request",
        AxonArpAnswered = "axon_arp_answered" in Axon: "ARP requests from hosts answered by the control plane",
        AxonDhcpOffers = "axon_dhcp_offers" in Axon: "DHCP OFFERs sent",
        AxonDhcpAcks = "axon_dhcp_acks" in Axon: "DHCP ACKs sent (leases granted or renewed)",
        AxonDhcpNaks = "axon_dhcp_naks" in Axon: "DHCP NAKs sent (an address this Axon cannot lease to that host)",
    }
}

/// Which roles count a counter; `show counters` prints only the element's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    All,
    Forwarder,
    Balancer,
    Switch,
    Axon,
}

impl Scope {
    /// Whether an element of role `self` counts a counter of scope `c`.
    pub fn counts(self, c: Scope) -> bool {
        c == Scope::All || c == self || self == Scope::All
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

/// What an element's fast path (its ports' own programs) forwarded, per fast-path port:
/// frames in, bytes in, frames out, bytes out, since it started.
pub type FastPathCounts = std::sync::Arc<dyn Fn() -> Vec<[u64; 6]> + Send + Sync>;

/// The fast path's counts and, per fast-path port, the index of its port here.
struct FastFold(Vec<usize>, FastPathCounts);

impl std::fmt::Debug for FastFold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FastFold({:?})", self.0)
    }
}

/// All counters of one element.
#[derive(Debug)]
pub struct Counters {
    /// The role whose counters `snapshot` shows.
    pub role: Scope,
    pub port_names: Vec<String>,
    pub ports: Vec<PortCounters>,
    drops: Vec<Counter>,
    events: Vec<Counter>,
    /// The fast path's frames, added to every read ([`Counters::fold_fast_path`]).
    fast: std::sync::OnceLock<FastFold>,
    /// The fast path's drops by reason, added to every read ([`Counters::fold_fast_drops`]).
    fast_drops: std::sync::OnceLock<FastDrops>,
}

/// What the fast path dropped, by reason, since it started.
pub type FastDropCounts = Arc<dyn Fn() -> Vec<(Drop, u64)> + Send + Sync>;

struct FastDrops(FastDropCounts);

impl std::fmt::Debug for FastDrops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FastDrops")
    }
}

impl Counters {
    /// Counters of a forwarder.
    pub fn new(port_names: Vec<String>) -> Counters {
        Counters::for_role(port_names, Scope::Forwarder)
    }

    pub fn for_role(port_names: Vec<String>, role: Scope) -> Counters {
        Counters {
            role,
            ports: port_names.iter().map(|_| PortCounters::default()).collect(),
            port_names,
            drops: (0..Drop::COUNT).map(|_| Counter::default()).collect(),
            events: (0..Event::COUNT).map(|_| Counter::default()).collect(),
            fast: std::sync::OnceLock::new(),
            fast_drops: std::sync::OnceLock::new(),
        }
    }

    /// From now on every read adds what `counts` says the fast path dropped (filters'
    /// drops), by reason. As [`Counters::fold_fast_path`]: on one worker's counters only.
    pub fn fold_fast_drops(&self, counts: FastDropCounts) {
        let _ = self.fast_drops.set(FastDrops(counts));
    }

    fn fast_drop_counts(&self) -> Vec<(Drop, u64)> {
        self.fast_drops.get().map(|f| (f.0)()).unwrap_or_default()
    }

    /// From now on every read of these counters ([`Counters::snapshot`],
    /// [`Counters::totals`]) adds what the element's fast path forwarded: its port `k`'s
    /// frames and bytes to the receive and send counts of port `ports[k]` here, and all of
    /// them to `fast_path_forwarded`; the frames it shed on their way to user space to the
    /// receive counts and to `slow_path_shed`. Set on one worker's counters only (the first), so
    /// that a sum over workers counts them once. Set once; later calls change nothing.
    pub fn fold_fast_path(&self, ports: Vec<usize>, counts: FastPathCounts) {
        let _ = self.fast.set(FastFold(ports, counts));
    }

    /// Per port here: the fast path's frames and bytes in and out (empty: none).
    fn fast_counts(&self) -> Vec<[u64; 6]> {
        let Some(FastFold(ports, counts)) = self.fast.get() else {
            return Vec::new();
        };
        let mut per = vec![[0u64; 6]; self.ports.len()];
        for (k, c) in counts().into_iter().enumerate() {
            if let Some(p) = ports.get(k).and_then(|&i| per.get_mut(i)) {
                for (a, b) in p.iter_mut().zip(c) {
                    *a += b;
                }
            }
        }
        per
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

    /// Counts a frame of `bytes` received on `port`; false if there is no such port.
    #[inline]
    pub fn count_rx(&self, port: u16, bytes: usize) -> bool {
        match self.ports.get(port as usize) {
            Some(pc) => {
                pc.rx_packets.inc();
                pc.rx_bytes.add(bytes as u64);
                true
            }
            None => false,
        }
    }

    /// (frames received, frames sent, frames dropped) over all ports and reasons, as hellos
    /// advertise them.
    pub fn totals(&self) -> (u64, u64, u64) {
        let fast = self.fast_counts();
        let rx = self.ports.iter().map(|p| p.rx_packets.get()).sum::<u64>()
            + fast.iter().map(|c| c[0] + c[4]).sum::<u64>();
        let tx = self.ports.iter().map(|p| p.tx_packets.get()).sum::<u64>()
            + fast.iter().map(|c| c[2]).sum::<u64>();
        let dropped = Drop::ALL
            .iter()
            .filter(|d| self.role.counts(d.scope()))
            .map(|d| self.drops(*d))
            .sum::<u64>()
            + fast.iter().map(|c| c[4]).sum::<u64>()
            + self.fast_drop_counts().iter().map(|d| d.1).sum::<u64>();
        (rx, tx, dropped)
    }

    pub fn drops(&self, d: Drop) -> u64 {
        self.drops[d as usize].get()
    }

    pub fn events(&self, e: Event) -> u64 {
        self.events[e as usize].get()
    }

    /// A consistent-enough copy for printing.
    pub fn snapshot(&self) -> Snapshot {
        let fast = self.fast_counts();
        let mut s = Snapshot {
            interfaces: self
                .port_names
                .iter()
                .zip(&self.ports)
                .enumerate()
                .map(|(i, (n, c))| {
                    let f = fast.get(i).copied().unwrap_or_default();
                    (
                        n.clone(),
                        PortSnapshot {
                            rx_packets: c.rx_packets.get() + f[0] + f[4],
                            rx_bytes: c.rx_bytes.get() + f[1] + f[5],
                            tx_packets: c.tx_packets.get() + f[2],
                            tx_bytes: c.tx_bytes.get() + f[3],
                        },
                    )
                })
                .collect(),
            drops: Drop::ALL
                .iter()
                .filter(|d| self.role.counts(d.scope()))
                .map(|d| (d.name().to_string(), self.drops(*d)))
                .collect(),
            events: Event::ALL
                .iter()
                .filter(|e| self.role.counts(e.scope()))
                .map(|e| (e.name().to_string(), self.events(*e)))
                .collect(),
        };
        if let Some(e) = s.events.get_mut(Event::FastPathForwarded.name()) {
            *e += fast.iter().map(|c| c[0]).sum::<u64>();
        }
        for (d, n) in self.fast_drop_counts() {
            if n > 0 {
                *s.drops.entry(d.name().to_string()).or_default() += n;
            }
        }
        let shed = fast.iter().map(|c| c[4]).sum::<u64>();
        if shed > 0 {
            *s.drops
                .entry(Drop::SlowPathShed.name().to_string())
                .or_default() += shed;
        }
        s
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

impl Snapshot {
    /// The counters of several workers of one element, summed (None for no workers).
    pub fn sum(all: &[Arc<Counters>]) -> Option<Snapshot> {
        Snapshot::sum_of(all.iter().map(|c| c.snapshot()).collect())
    }

    /// Snapshots of several workers, summed (None for none): with the same snapshots
    /// giving each worker's [`Snapshot::totals`], the sum and the shares agree however
    /// the counters move meanwhile.
    pub fn sum_of(parts: Vec<Snapshot>) -> Option<Snapshot> {
        let mut it = parts.into_iter();
        let mut s = it.next()?;
        for o in it {
            for (name, p) in o.interfaces {
                let t = s.interfaces.entry(name).or_insert(PortSnapshot {
                    rx_packets: 0,
                    rx_bytes: 0,
                    tx_packets: 0,
                    tx_bytes: 0,
                });
                t.rx_packets += p.rx_packets;
                t.rx_bytes += p.rx_bytes;
                t.tx_packets += p.tx_packets;
                t.tx_bytes += p.tx_bytes;
            }
            for (k, v) in o.drops {
                *s.drops.entry(k).or_default() += v;
            }
            for (k, v) in o.events {
                *s.events.entry(k).or_default() += v;
            }
        }
        Some(s)
    }

    /// Packets received and sent over all ports, and drops of every reason.
    pub fn totals(&self) -> (u64, u64, u64) {
        let rx = self.interfaces.values().map(|p| p.rx_packets).sum();
        let tx = self.interfaces.values().map(|p| p.tx_packets).sum();
        (rx, tx, self.drops.values().sum())
    }
}

/// Every counter name of a role with its description, for `tessera show counters --describe`.
pub fn descriptions_for(role: Scope) -> BTreeMap<&'static str, &'static str> {
    Drop::ALL
        .iter()
        .filter(|d| role.counts(d.scope()))
        .map(|d| (d.name(), d.description()))
        .chain(
            Event::ALL
                .iter()
                .filter(|e| role.counts(e.scope()))
                .map(|e| (e.name(), e.description())),
        )
        .collect()
}

/// Every counter name with its description.
pub fn descriptions() -> BTreeMap<&'static str, &'static str> {
    descriptions_for(Scope::All)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_described() {
        let d = descriptions();
        assert_eq!(d.len(), Drop::COUNT + Event::COUNT);
        assert!(d.values().all(|s| !s.is_empty()));
        let lb = Counters::for_role(vec![], Scope::Balancer).snapshot();
        assert!(
            lb.drops.contains_key("balance_no_backend") && !lb.drops.contains_key("ip4_no_route")
        );
        let f = Counters::new(vec![]).snapshot();
        assert!(
            !f.drops.contains_key("balance_no_backend") && f.drops.contains_key("ip4_no_route")
        );
        assert!(
            f.drops.contains_key("dist_not_internal") && lb.drops.contains_key("dist_not_internal")
        );
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
