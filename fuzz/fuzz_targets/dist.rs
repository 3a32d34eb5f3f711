//! The DIST message parser on arbitrary bytes: no panic, and whatever parses emits and
//! parses back to itself; the same bytes as a frame through the authentication check.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::fuzzing::parse_dist(data);
    wire::fuzzing::check_dist_auth(data);
});
