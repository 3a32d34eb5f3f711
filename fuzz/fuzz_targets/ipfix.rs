//! IPFIX: the decoder on arbitrary bytes (no panic), and the encoder's round trip: the
//! bytes read as flow records, encoded, decoded by the independent decoder, compared.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::fuzzing::ipfix(data);
});
