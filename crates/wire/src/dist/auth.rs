//! DIST authentication: a message authentication code and a counter against replay.
//!
//! A sealed message has the [`FLAG`] bit set in its type byte and a trailer of
//! [`TRAILER_LEN`] bytes right after its body (before any Ethernet padding):
//!
//! ```text
//!  0        1             4                          12                              28
//!  +--------+-------------+--------------------------+-------------------------------+
//!  | key id | reserved (0)| counter (u64, big-endian) | tag: HMAC-SHA-256, first 16 B |
//!  +--------+-------------+--------------------------+-------------------------------+
//! ```
//!
//! The tag covers the frame's destination and source MACs, the DIST header (flag set) and
//! body, and the trailer up to the tag. Covering the MACs means a captured message cannot be
//! re-addressed to another element, nor passed off as another sender's.
//!
//! The counter is the sender's clock in nanoseconds since the Unix epoch, raised by one
//! where two messages would share a value ([`Signer`]), so it grows across restarts without
//! any state on disk. A receiver ([`Guard`]) keeps, per sender MAC, the 64 highest
//! counters accepted (an anti-replay window as IPsec's, RFC 4303 3.4.3, counted in
//! messages because counters are sparse): a counter among them, or below the lowest of
//! them, is a replay. The window absorbs reordering between an element's threads. A counter older than `max_age` of the
//! receiver's own clock is stale, which bounds what a receiver that restarted (and so forgot
//! its windows) can be fed again; elements' clocks must then agree within `max_age` (NTP).

use crate::MacAddr;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bit of the type byte that marks a sealed message.
pub const FLAG: u8 = 0x80;
/// Bytes of the trailer of a sealed message.
pub const TRAILER_LEN: usize = 28;
/// Bytes of the tag (HMAC-SHA-256 truncated, as in RFC 4868's HMAC-SHA-256-128).
pub const TAG_LEN: usize = 16;
/// The shortest key accepted, in bytes.
pub const MIN_KEY_LEN: usize = 16;
/// Width of the replay window, in messages.
pub const WINDOW: u64 = 64;
/// Most senders a [`Guard`] keeps a window for; beyond, the one heard from least recently
/// is forgotten (its old messages then fall to the `max_age` check).
pub const MAX_SENDERS: usize = 4096;

const ETH: usize = 14;
const DIST_HEADER: usize = super::HEADER_LEN;

/// A shared secret and its id.
#[derive(Clone)]
pub struct Key {
    id: u8,
    mac: Hmac<Sha256>,
}

impl core::fmt::Debug for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Key {{ id: {} }}", self.id)
    }
}

impl Key {
    /// A key of at least [`MIN_KEY_LEN`] bytes.
    pub fn new(id: u8, secret: &[u8]) -> Result<Key, String> {
        if secret.len() < MIN_KEY_LEN {
            return Err(format!(
                "a DIST key needs at least {MIN_KEY_LEN} bytes ({} hex digits), this one has {}",
                2 * MIN_KEY_LEN,
                secret.len()
            ));
        }
        let mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|e| e.to_string())?;
        Ok(Key { id, mac })
    }

    /// A key written as hexadecimal digits (whitespace around them ignored).
    pub fn from_hex(id: u8, text: &str) -> Result<Key, String> {
        let t = text.trim();
        if !t.len().is_multiple_of(2) || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("a DIST key is written as an even number of hex digits".into());
        }
        let bytes: Vec<u8> = (0..t.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&t[i..i + 2], 16).expect("checked hex digits"))
            .collect();
        Key::new(id, &bytes)
    }

    pub fn id(&self) -> u8 {
        self.id
    }

    fn tag(&self, dst: &[u8], src: &[u8], covered: &[u8]) -> [u8; 32] {
        let mut m = self.mac.clone();
        m.update(dst);
        m.update(src);
        m.update(covered);
        m.finalize().into_bytes().into()
    }
}

/// Why a frame was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Not sealed, or sealed under another key id, where a key is required.
    Unauthenticated,
    /// The tag does not match: forged, altered, or sealed under another key.
    Forged,
    /// A counter already accepted from this sender, or below its window.
    Replayed,
    /// A counter older than `max_age` of the receiver's clock.
    Stale,
    /// Too short to hold what its header says (counted as malformed).
    Malformed,
}

impl Reject {
    /// The counter name of the reason.
    pub fn name(self) -> &'static str {
        match self {
            Reject::Unauthenticated => "dist_unauthenticated",
            Reject::Forged => "dist_forged",
            Reject::Replayed => "dist_replayed",
            Reject::Stale => "dist_stale",
            Reject::Malformed => "dist_malformed",
        }
    }
}

/// Where the trailer of the sealed DIST message in `frame` (an untagged Ethernet frame)
/// starts, or `None` if the frame carries no sealed message.
fn trailer_at(frame: &[u8]) -> Result<Option<usize>, Reject> {
    if frame.len() < ETH + DIST_HEADER {
        return Err(Reject::Malformed);
    }
    let d = &frame[ETH..];
    if d[1] & FLAG == 0 {
        return Ok(None);
    }
    let end = DIST_HEADER + u16::from_be_bytes([d[2], d[3]]) as usize;
    if d.len() < end + TRAILER_LEN {
        return Err(Reject::Malformed);
    }
    Ok(Some(ETH + end))
}

/// The key id and counter of a sealed message, without checking its tag (for display).
pub fn trailer(frame: &[u8]) -> Option<(u8, u64)> {
    let at = trailer_at(frame).ok()??;
    let counter = u64::from_be_bytes(frame[at + 4..at + 12].try_into().ok()?);
    Some((frame[at], counter))
}

/// Seals the DIST message in `frame` (an untagged Ethernet frame, as
/// [`super::Repr::to_frame`] builds): drops any padding, sets the flag, appends the trailer
/// and pads to the 60-byte minimum again.
pub fn seal(frame: &mut Vec<u8>, key: &Key, counter: u64) -> Result<(), Reject> {
    if frame.len() < ETH + DIST_HEADER {
        return Err(Reject::Malformed);
    }
    let end = ETH + DIST_HEADER + u16::from_be_bytes([frame[ETH + 2], frame[ETH + 3]]) as usize;
    if frame.len() < end {
        return Err(Reject::Malformed);
    }
    frame.truncate(end);
    frame[ETH + 1] |= FLAG;
    frame.push(key.id);
    frame.extend_from_slice(&[0, 0, 0]);
    frame.extend_from_slice(&counter.to_be_bytes());
    let tag = key.tag(&frame[0..6], &frame[6..12], &frame[ETH..]);
    frame.extend_from_slice(&tag[..TAG_LEN]);
    if frame.len() < 60 {
        frame.resize(60, 0);
    }
    Ok(())
}

/// Checks the tag of the sealed message in `frame`; its counter if the tag is right.
pub fn verify(frame: &[u8], key: &Key) -> Result<u64, Reject> {
    let at = trailer_at(frame)?.ok_or(Reject::Unauthenticated)?;
    if frame[at] != key.id {
        return Err(Reject::Unauthenticated);
    }
    let tag = key.tag(&frame[0..6], &frame[6..12], &frame[ETH..at + 12]);
    let got = &frame[at + 12..at + TRAILER_LEN];
    // Constant time: the tag is compared without an early exit.
    if tag[..TAG_LEN]
        .iter()
        .zip(got)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        != 0
    {
        return Err(Reject::Forged);
    }
    Ok(u64::from_be_bytes(
        frame[at + 4..at + 12].try_into().expect("8 bytes"),
    ))
}

/// The [`WINDOW`] highest counters accepted from one sender. Counters are clock readings,
/// so they are sparse: the window is counted in messages, not in counter values (a
/// bitmap over values, as IPsec keeps, would call a message overtaken by one sent a
/// millisecond later a replay).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    /// Ascending, at most [`WINDOW`] long.
    recent: Vec<u64>,
}

impl Window {
    /// Whether `c` would be new: not among the counters kept, and above the lowest of
    /// them once the window is full.
    pub fn fresh(&self, c: u64) -> bool {
        if self.recent.len() == WINDOW as usize && c < self.recent[0] {
            return false;
        }
        self.recent.binary_search(&c).is_err()
    }

    /// Records `c` (which must be [`Window::fresh`]).
    pub fn accept(&mut self, c: u64) {
        if let Err(at) = self.recent.binary_search(&c) {
            self.recent.insert(at, c);
            if self.recent.len() > WINDOW as usize {
                self.recent.remove(0);
            }
        }
    }
}

/// The receiving side: checks frames against the key and each sender's window.
#[derive(Debug)]
pub struct Guard {
    key: Option<Key>,
    max_age_ns: u64,
    windows: HashMap<MacAddr, (Window, u64)>,
}

impl Guard {
    /// Without a key every frame passes (authentication off). `max_age_ns` 0: no age limit.
    pub fn new(key: Option<Key>, max_age_ns: u64) -> Guard {
        Guard {
            key,
            max_age_ns,
            windows: HashMap::new(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.key.is_some()
    }

    /// Accepts or rejects the DIST frame `frame` (untagged Ethernet) at `now_ns`
    /// (nanoseconds since the Unix epoch). An accepted counter is recorded.
    pub fn check(&mut self, frame: &[u8], now_ns: u64) -> Result<(), Reject> {
        let Some(key) = &self.key else {
            return Ok(());
        };
        let c = verify(frame, key)?;
        if self.max_age_ns != 0 && c.saturating_add(self.max_age_ns) < now_ns {
            return Err(Reject::Stale);
        }
        let src = MacAddr::from_slice(&frame[6..12]);
        if !self.windows.contains_key(&src) && self.windows.len() >= MAX_SENDERS {
            if let Some(oldest) = self
                .windows
                .iter()
                .min_by_key(|(_, (_, heard))| *heard)
                .map(|(m, _)| *m)
            {
                self.windows.remove(&oldest);
            }
        }
        let (w, heard) = self.windows.entry(src).or_default();
        if !w.fresh(c) {
            return Err(Reject::Replayed);
        }
        w.accept(c);
        *heard = now_ns;
        Ok(())
    }
}

/// The sending side: seals frames under the key with a counter that never repeats.
/// Shared by the threads of an element that send DIST.
#[derive(Debug)]
pub struct Signer {
    key: Option<Key>,
    last: AtomicU64,
}

impl Signer {
    /// Without a key frames go out unsealed.
    pub fn new(key: Option<Key>) -> Signer {
        Signer {
            key,
            last: AtomicU64::new(0),
        }
    }

    pub fn enabled(&self) -> bool {
        self.key.is_some()
    }

    /// The next counter: `now_ns`, or one more than the last if that is not above it.
    pub fn next_counter(&self, now_ns: u64) -> u64 {
        let prev = self
            .last
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| {
                Some(l.saturating_add(1).max(now_ns))
            })
            .expect("the closure always gives a value");
        prev.saturating_add(1).max(now_ns)
    }

    /// Seals `frame` (see [`seal`]) if there is a key.
    pub fn seal(&self, frame: &mut Vec<u8>, now_ns: u64) -> Result<(), Reject> {
        match &self.key {
            Some(k) => seal(frame, k, self.next_counter(now_ns)),
            None => Ok(()),
        }
    }
}

/// Nanoseconds since the Unix epoch by the system clock (what counters are made of).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::{Message, Repr};

    fn key(b: u8) -> Key {
        Key::new(1, &[b; 32]).unwrap()
    }

    fn frame(seq: u32) -> Vec<u8> {
        Repr {
            seq,
            msg: Message::VirtualCp {
                mac: MacAddr([2, 0, 0, 0, 0, 9]),
                port: 1,
            },
        }
        .to_frame(MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]))
        .unwrap()
    }

    const T: u64 = 1_800_000_000_000_000_000;

    #[test]
    fn sealed_frames_parse_and_verify() {
        let mut f = frame(3);
        seal(&mut f, &key(7), T).unwrap();
        assert_eq!(f[14 + 1], crate::dist::kind::VIRTUAL_CP | FLAG);
        assert_eq!(verify(&f, &key(7)), Ok(T));
        assert_eq!(trailer(&f), Some((1, T)));
        // The message still parses, for receivers with authentication off too.
        let r = Repr::parse(&f[14..]).unwrap();
        assert_eq!(r.seq, 3);
        assert!(matches!(r.msg, Message::VirtualCp { port: 1, .. }));
    }

    #[test]
    fn forged_altered_and_unsealed_frames_fail() {
        let mut f = frame(3);
        seal(&mut f, &key(7), T).unwrap();
        assert_eq!(verify(&f, &key(8)), Err(Reject::Forged));
        let end = 14 + 8 + 8 + TRAILER_LEN;
        for at in [0, 6, 14, 14 + 8, end - TRAILER_LEN + 4, end - 1] {
            let mut g = f.clone();
            g[at] ^= 1;
            assert_eq!(
                verify(&g, &key(7)),
                Err(Reject::Forged),
                "byte {at} flipped"
            );
        }
        assert_eq!(
            verify(&frame(3), &key(7)),
            Err(Reject::Unauthenticated),
            "an unsealed frame"
        );
        let other_id = {
            let mut g = frame(3);
            seal(&mut g, &Key::new(2, &[7; 32]).unwrap(), T).unwrap();
            g
        };
        assert_eq!(verify(&other_id, &key(7)), Err(Reject::Unauthenticated));
        // A trailer cut short is malformed, not a panic.
        let mut short = f.clone();
        short.truncate(14 + 8 + 8 + 10);
        assert_eq!(verify(&short, &key(7)), Err(Reject::Malformed));
        assert_eq!(verify(&f[..10], &key(7)), Err(Reject::Malformed));
    }

    #[test]
    fn guard_drops_replays_and_stale_frames() {
        let s = Signer::new(Some(key(7)));
        let mut g = Guard::new(Some(key(7)), 60_000_000_000);
        let mut a = frame(1);
        s.seal(&mut a, T).unwrap();
        let mut b = frame(2);
        s.seal(&mut b, T).unwrap(); // the same clock: counter T + 1
        assert_eq!(trailer(&b), Some((1, T + 1)));
        // Out of order within the window is fine; each only once.
        assert_eq!(g.check(&b, T), Ok(()));
        assert_eq!(g.check(&a, T), Ok(()));
        assert_eq!(g.check(&a, T), Err(Reject::Replayed));
        assert_eq!(g.check(&b, T), Err(Reject::Replayed));
        // Older than max_age by the receiver's clock.
        let mut c = frame(3);
        s.seal(&mut c, T + 2).unwrap();
        assert_eq!(g.check(&c, T + 61_000_000_000), Err(Reject::Stale));
        // A receiver without a key takes anything.
        assert_eq!(Guard::new(None, 1).check(&frame(9), T), Ok(()));
        // A key but an unsealed frame: dropped.
        assert_eq!(g.check(&frame(9), T), Err(Reject::Unauthenticated));
    }

    #[test]
    fn window_slides() {
        let mut w = Window::default();
        assert!(w.fresh(100));
        w.accept(100);
        assert!(!w.fresh(100));
        // Sparse counters (clock readings): one overtaken by a later one is still new.
        w.accept(5_000_000);
        assert!(w.fresh(2_000_000) && w.fresh(99));
        w.accept(2_000_000);
        assert!(!w.fresh(2_000_000));
        // Once 64 are kept, what lies below the lowest of them is old.
        for i in 0..WINDOW {
            w.accept(10_000_000 + i * 1_000_000);
        }
        assert!(
            !w.fresh(5_000_000) && !w.fresh(100),
            "fell out of the window"
        );
        assert!(!w.fresh(10_000_000 + 3_000_000), "kept, so a replay");
        assert!(
            w.fresh(10_000_000 + 3_500_000),
            "never seen, inside the window"
        );
        assert!(w.fresh(u64::MAX));
    }

    #[test]
    fn signer_counters_never_repeat_or_fall() {
        let s = Signer::new(Some(key(1)));
        let mut last = 0;
        for now in [T, T, T - 5, T + 1, T + 10, T + 3] {
            let c = s.next_counter(now);
            assert!(c > last && c >= now.min(c));
            last = c;
        }
        assert_eq!(s.next_counter(T + 100), T + 100);
    }

    #[test]
    fn keys_from_hex() {
        assert!(Key::from_hex(1, &"ab".repeat(16)).is_ok());
        assert!(Key::from_hex(1, &format!(" {}\n", "0f".repeat(32))).is_ok());
        assert!(Key::from_hex(1, &"ab".repeat(15))
            .unwrap_err()
            .contains("at least 16"));
        assert!(Key::from_hex(1, "xyz").is_err());
        assert!(Key::from_hex(1, "abc").is_err());
    }
}
