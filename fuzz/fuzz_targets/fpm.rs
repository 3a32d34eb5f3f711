//! The controller's FPM reader (zebra's dplane_fpm_nl stream), on arbitrary bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| control::fuzzing::fpm(data));
