//! The switch's per-frame path (learning, flooding, queues) on arbitrary frames (first
//! byte: input port and flags).
#![no_main]
use std::cell::RefCell;

thread_local! {
    static S: RefCell<(dataplane::switch::Switch, std::time::Instant)> =
        RefCell::new(dataplane::fuzzing::switch());
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    S.with(|s| {
        let (sw, now) = &mut *s.borrow_mut();
        dataplane::fuzzing::switch_frame(sw, *now, data);
    })
});
