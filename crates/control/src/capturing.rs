//! Whether a `tessera capture` runs in this process: each element's worker counts its
//! capture while it runs, and the fast paths (forwarder, LB, switch) hand frames to user
//! space while any does, where the capture sees them.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Captures under way in this process ([`capture_under_way`]).
static CAPTURES: AtomicUsize = AtomicUsize::new(0);

/// Whether a `tessera capture` runs on this element: its fast path then hands every frame
/// to user space, where the capture sees it (each element's worker follows this).
pub fn capture_under_way() -> bool {
    CAPTURES.load(Ordering::Relaxed) > 0
}

/// Keeps [`CAPTURES`] in step with one worker's capture: counted while it runs.
#[derive(Default)]
pub(crate) struct CaptureFlag(bool);

impl CaptureFlag {
    pub(crate) fn set(&mut self, on: bool) {
        if on != self.0 {
            if on {
                CAPTURES.fetch_add(1, Ordering::Relaxed);
            } else {
                CAPTURES.fetch_sub(1, Ordering::Relaxed);
            }
            self.0 = on;
        }
    }
}

impl std::ops::Drop for CaptureFlag {
    fn drop(&mut self) {
        self.set(false);
    }
}
