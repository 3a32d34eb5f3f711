//! The DIST message parser on arbitrary bytes: no panic, and whatever parses emits and
//! parses back to itself.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| wire::fuzzing::parse_dist(data));
