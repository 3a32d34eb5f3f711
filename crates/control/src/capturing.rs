//! Whether a `tessera capture` runs in this process: each element's worker counts its
//! capture while it runs, and the fast paths (forwarder, LB, switch) hand frames to user
//! space while any does, where the capture sees them. The first worker of an element
//! starts and stops a capture; its other workers follow it ([`Follower`]), so the capture
//! sees every worker's frames.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

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

/// A capture as the first worker of an element started it, for its other workers to
/// follow (their frames go to the same reader).
#[derive(Debug, Clone)]
pub struct CaptureSpec {
    pub path: std::path::PathBuf,
    pub port: Option<u16>,
    pub filter: Option<Vec<dataplane::capture::Insn>>,
    pub count: Option<u64>,
}

/// The capture the other workers follow: a new generation at every start and end, and
/// what they captured and lost (for `capture-stop`'s answer).
struct Order {
    generation: AtomicU64,
    spec: Mutex<Option<CaptureSpec>>,
    captured: AtomicU64,
    lost: AtomicU64,
}

static ORDER: Order = Order {
    generation: AtomicU64::new(0),
    spec: Mutex::new(None),
    captured: AtomicU64::new(0),
    lost: AtomicU64::new(0),
};

/// The first worker started a capture (`Some`) or ended it (`None`): the other workers
/// follow at their next poll. A start clears the followers' totals.
pub(crate) fn order(spec: Option<CaptureSpec>) {
    let mut s = ORDER.spec.lock().unwrap_or_else(|e| e.into_inner());
    if spec.is_some() {
        ORDER.captured.store(0, Ordering::Relaxed);
        ORDER.lost.store(0, Ordering::Relaxed);
    }
    *s = spec;
    ORDER.generation.fetch_add(1, Ordering::Release);
}

/// What the other workers captured and lost in the current (or last) capture.
pub(crate) fn followers_totals() -> (u64, u64) {
    (
        ORDER.captured.load(Ordering::Relaxed),
        ORDER.lost.load(Ordering::Relaxed),
    )
}

/// A worker other than the first: follows the first worker's capture.
#[derive(Default)]
pub(crate) struct Follower {
    generation: u64,
    reported: (u64, u64),
}

impl Follower {
    /// The capture this worker should run now, if the first worker's changed since the
    /// last call (`Some(None)`: none; `Some(Some(c))`: this one); `None` if nothing changed.
    /// One atomic load when nothing did.
    pub(crate) fn changed(&mut self) -> Option<Option<dataplane::capture::Capture>> {
        let g = ORDER.generation.load(Ordering::Acquire);
        if g == self.generation {
            return None;
        }
        self.generation = g;
        self.reported = (0, 0);
        let spec = ORDER.spec.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Some(spec.and_then(|s| {
            dataplane::capture::Capture::new(s.path, s.port, s.filter, s.count)
                .map_err(|e| tracing::warn!(error = %e, "a worker could not follow the capture"))
                .ok()
        }))
    }

    /// Adds what this worker's capture counted since the last call to the followers'
    /// totals.
    pub(crate) fn report(&mut self, c: &dataplane::capture::Capture) {
        let (captured, lost) = (c.captured, c.dropped);
        ORDER
            .captured
            .fetch_add(captured - self.reported.0, Ordering::Relaxed);
        ORDER
            .lost
            .fetch_add(lost - self.reported.1, Ordering::Relaxed);
        self.reported = (captured, lost);
    }
}
