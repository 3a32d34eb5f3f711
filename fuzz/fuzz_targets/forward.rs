//! The forwarder's whole per-packet path, on arbitrary frames (first byte: port and flags).
#![no_main]
use std::cell::RefCell;

thread_local! {
    static F: RefCell<(dataplane::forwarder::Forwarder, std::time::Instant)> =
        RefCell::new(dataplane::fuzzing::forwarder());
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    F.with(|f| {
        let (fwd, now) = &mut *f.borrow_mut();
        dataplane::fuzzing::forward(fwd, *now, data);
    })
});
