//! The LB's per-frame path (classifier, ARP, DIST, balance) on arbitrary frames (first byte:
//! port and flags).
#![no_main]
use std::cell::RefCell;

thread_local! {
    static B: RefCell<(dataplane::balancer::Balancer, std::time::Instant)> =
        RefCell::new(dataplane::fuzzing::balancer());
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    B.with(|b| {
        let (lb, now) = &mut *b.borrow_mut();
        dataplane::fuzzing::balance(lb, *now, data);
    })
});
