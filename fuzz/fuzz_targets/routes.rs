//! The routes-file parser, on arbitrary text.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| control::fuzzing::routes(data));
