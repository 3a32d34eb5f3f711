//! Capture filters (classic BPF checked and run on arbitrary frames), `tcpdump -ddd` text
//! and capture batches on arbitrary bytes: no panic, no endless loop.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    dataplane::fuzzing::capture(data);
});
