//! The IPv6 parsers (extension-header walk, ICMPv6 and Neighbor Discovery, UDP and TCP
//! checksums over IPv6) on arbitrary bytes as an IPv6 packet.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| wire::fuzzing::parse_ipv6(data));
