//! Every wire parser, on arbitrary bytes as an Ethernet frame.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| wire::fuzzing::parse_frame(data));
