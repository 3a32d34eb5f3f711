//! The MRT (RFC 6396) table reader, on arbitrary bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| control::fuzzing::mrt(data));
