//! Access lists: rules parsed from arbitrary text as a config's fields, and the decision on
//! an arbitrary packet (IPv4 and IPv6): no panic, the first matching rule decides.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    dataplane::fuzzing::acl(data);
});
