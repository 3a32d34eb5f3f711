//! The forwarder's config parser and validator, on arbitrary text.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| control::fuzzing::config(data));
