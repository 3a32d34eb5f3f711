//! A star member forwarder (dataplane::fuzzing::star_forwarder) on arbitrary frames:
//! star frames from the internal port and packets that cross the star; no panic, every
//! frame sent within its port's MTU.
#![no_main]
use std::cell::RefCell;

thread_local! {
    static F: RefCell<(dataplane::forwarder::Forwarder, std::time::Instant)> =
        RefCell::new(dataplane::fuzzing::star_forwarder());
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    F.with(|f| {
        let (fwd, now) = &mut *f.borrow_mut();
        dataplane::fuzzing::forward(fwd, *now, data);
    })
});
