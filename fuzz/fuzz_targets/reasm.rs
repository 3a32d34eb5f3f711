//! Reassembly of datagrams addressed to the router on arbitrary fragments (split at each
//! 0xff 0xfe): no panic, valid datagrams, memory within its cap.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    dataplane::fuzzing::reasm(data);
});
