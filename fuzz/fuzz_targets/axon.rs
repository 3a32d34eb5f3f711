//! The Axon's per-frame path (host frames, ARP, Axon headers, control messages) on
//! arbitrary frames (first byte: input port and flags).
#![no_main]
use std::cell::RefCell;

thread_local! {
    static A: RefCell<(dataplane::axon::Axon, std::time::Instant)> =
        RefCell::new(dataplane::fuzzing::axon());
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    A.with(|a| {
        let (ax, now) = &mut *a.borrow_mut();
        dataplane::fuzzing::axon_frame(ax, *now, data);
    })
});
