//! Packet buffers: a frame's bytes with room in front of them, in memory of the buffer's
//! own (the heap) or lent by a frame store (an AF_XDP UMEM), so that a frame received
//! into a UMEM can leave by another socket of the same UMEM without a copy.
//!
//! [`Buf`] behaves as the `Vec<u8>` it replaces (`len`, `extend_from_slice`, `truncate`,
//! `resize`, `clear`, slicing), and adds [`Splice::insert_at`] and
//! [`Splice::remove_at`], which move the shorter side of the frame: a tag pushed after the
//! MAC addresses moves 12 bytes into the headroom, not the whole frame forward. A buffer
//! that outgrows a lent frame moves to the heap and gives the frame back, so no operation
//! fails for lack of room.
//!
//! This crate holds the few lines of `unsafe` that a lent buffer needs (a pointer into
//! memory the store owns); the crates above it stay free of `unsafe`.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

/// Bytes kept free in front of a heap buffer's frame, for tags and headers pushed there.
pub const HEADROOM: usize = 64;

/// Memory of frames that buffers borrow ([`Buf::lend`]): an AF_XDP UMEM.
pub trait FrameStore: Send + Sync {
    /// Takes back frame `id`: its buffer was dropped, or moved to the heap.
    fn release(&self, id: u64);
}

/// A frame's bytes that grow and shrink: what builders and tag pushers need, for `Vec<u8>`
/// and [`Buf`] alike. The first four are `Vec`'s own methods.
pub trait Splice: DerefMut<Target = [u8]> {
    fn extend_from_slice(&mut self, bytes: &[u8]);
    fn resize(&mut self, len: usize, value: u8);
    fn truncate(&mut self, len: usize);
    fn push(&mut self, byte: u8);
    /// Inserts `bytes` before byte `at`. Panics if `at` is past the end, as `Vec` does.
    fn insert_at(&mut self, at: usize, bytes: &[u8]);
    /// Removes `n` bytes from byte `at`. Panics if they are not all there, as `Vec` does.
    fn remove_at(&mut self, at: usize, n: usize);
}

impl Splice for Vec<u8> {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes)
    }

    fn resize(&mut self, len: usize, value: u8) {
        Vec::resize(self, len, value)
    }

    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len)
    }

    fn push(&mut self, byte: u8) {
        Vec::push(self, byte)
    }

    fn insert_at(&mut self, at: usize, bytes: &[u8]) {
        self.splice(at..at, bytes.iter().copied());
    }

    fn remove_at(&mut self, at: usize, n: usize) {
        self.drain(at..at + n);
    }
}

struct Lent {
    store: Arc<dyn FrameStore>,
    id: u64,
}

/// A frame's bytes: `len` bytes from `head` in `cap` bytes of storage at `base`, which is
/// the buffer's own (a boxed slice) or, when `lent` is set, a frame of a store.
pub struct Buf {
    base: NonNull<u8>,
    cap: usize,
    head: usize,
    len: usize,
    lent: Option<Lent>,
}

// SAFETY: a Buf owns its storage exclusively (its own box, or a lent frame that nobody
// else touches until it is released), and gives access to it only through &self/&mut self.
unsafe impl Send for Buf {}
// SAFETY: as above; &Buf gives only shared access to the bytes.
unsafe impl Sync for Buf {}

impl Buf {
    /// An empty heap buffer with room for `cap` bytes after [`HEADROOM`].
    pub fn with_capacity(cap: usize) -> Buf {
        let storage = vec![0u8; HEADROOM + cap].into_boxed_slice();
        let cap = storage.len();
        // Box::into_raw never returns null.
        let base = NonNull::new(Box::into_raw(storage) as *mut u8).expect("boxed slice");
        Buf {
            base,
            cap,
            head: HEADROOM,
            len: 0,
            lent: None,
        }
    }

    /// A heap buffer holding a copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> Buf {
        let mut b = Buf::with_capacity(bytes.len());
        b.extend_from_slice(bytes);
        b
    }

    /// A buffer over frame `id` of `store`: `len` bytes from `head` in the `cap` bytes at
    /// `base`.
    ///
    /// # Safety
    /// `base..base + cap` must be valid for reads and writes, not used by anybody else
    /// until the store gets the frame back (`release`, or [`Buf::take_lent`]), and stay
    /// valid as long as `store` lives; `head + len <= cap`.
    pub unsafe fn lend(
        store: Arc<dyn FrameStore>,
        id: u64,
        base: NonNull<u8>,
        cap: usize,
        head: usize,
        len: usize,
    ) -> Buf {
        assert!(head + len <= cap, "lent frame out of bounds");
        Buf {
            base,
            cap,
            head,
            len,
            lent: Some(Lent { store, id }),
        }
    }

    /// Whether the bytes are in a frame lent by a store.
    pub fn is_lent(&self) -> bool {
        self.lent.is_some()
    }

    /// If the bytes are in a frame of `store` (compared by address), hands the frame back
    /// to the caller without releasing it: `(id, head, len)`, the frame's id and where its
    /// bytes are in it. Any other buffer comes back as it is.
    pub fn take_lent(self, store: *const ()) -> Result<(u64, usize, usize), Buf> {
        match &self.lent {
            Some(l) if Arc::as_ptr(&l.store) as *const () == store => {
                let me = std::mem::ManuallyDrop::new(self);
                let (id, head, len) = (me.lent.as_ref().map_or(0, |l| l.id), me.head, me.len);
                // SAFETY: `me` is never used or dropped again; its store reference is
                // read out once here and dropped (the frame is the caller's now).
                drop(unsafe { std::ptr::read(&me.lent) });
                Ok((id, head, len))
            }
            _ => Err(self),
        }
    }

    /// The bytes a buffer holds without growing: what follows the frame's first byte.
    pub fn capacity(&self) -> usize {
        self.cap - self.head
    }

    pub fn as_slice(&self) -> &[u8] {
        self
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.head = HEADROOM.min(self.cap);
    }

    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    pub fn resize(&mut self, len: usize, value: u8) {
        if len > self.len {
            self.room_for(len);
            let (h, l) = (self.head, self.len);
            self.storage()[h + l..h + len].fill(value);
        }
        self.len = len;
    }

    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        let l = self.len;
        self.room_for(l + bytes.len());
        let h = self.head;
        self.storage()[h + l..h + l + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    pub fn push(&mut self, byte: u8) {
        self.extend_from_slice(&[byte]);
    }

    /// Inserts `bytes` before byte `at`, moving the shorter side of the frame (into the
    /// headroom where there is room). Panics if `at` is past the end, as `Vec` does.
    pub fn insert_at(&mut self, at: usize, bytes: &[u8]) {
        assert!(at <= self.len, "insert at {at} past the end ({})", self.len);
        let n = bytes.len();
        let (h, l) = (self.head, self.len);
        if h >= n && (at <= l - at || h + l + n > self.cap) {
            // Move the front into the headroom.
            self.storage().copy_within(h..h + at, h - n);
            self.head -= n;
        } else {
            self.room_for(l + n);
            let h = self.head;
            self.storage().copy_within(h + at..h + l, h + at + n);
        }
        let h = self.head;
        self.storage()[h + at..h + at + n].copy_from_slice(bytes);
        self.len += n;
    }

    /// Removes `n` bytes from byte `at`, moving the shorter side. Panics if they are not
    /// all there, as `Vec` does.
    pub fn remove_at(&mut self, at: usize, n: usize) {
        assert!(
            at.checked_add(n).is_some_and(|e| e <= self.len),
            "remove {n} at {at} past the end ({})",
            self.len
        );
        let (h, l) = (self.head, self.len);
        if at < l - at - n {
            self.storage().copy_within(h..h + at, h + n);
            self.head += n;
        } else {
            self.storage().copy_within(h + at + n..h + l, h + at);
        }
        self.len -= n;
    }

    /// All the storage, headroom included.
    fn storage(&mut self) -> &mut [u8] {
        // SAFETY: base..base + cap is this buffer's own box or a frame lent to it (the
        // contract of `lend`), and &mut self makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.cap) }
    }

    /// Makes room for `len` bytes after `head`, moving the bytes to a bigger heap buffer
    /// (and giving a lent frame back) when the storage is too small.
    fn room_for(&mut self, len: usize) {
        if self.head + len <= self.cap {
            return;
        }
        let mut bigger = Buf::with_capacity(len.max(2 * self.capacity()));
        bigger.extend_from_slice(self);
        *self = bigger;
    }
}

impl Splice for Buf {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Buf::extend_from_slice(self, bytes)
    }

    fn resize(&mut self, len: usize, value: u8) {
        Buf::resize(self, len, value)
    }

    fn truncate(&mut self, len: usize) {
        Buf::truncate(self, len)
    }

    fn push(&mut self, byte: u8) {
        Buf::push(self, byte)
    }

    fn insert_at(&mut self, at: usize, bytes: &[u8]) {
        Buf::insert_at(self, at, bytes)
    }

    fn remove_at(&mut self, at: usize, n: usize) {
        Buf::remove_at(self, at, n)
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        match self.lent.take() {
            Some(l) => l.store.release(l.id),
            None => {
                let storage = std::ptr::slice_from_raw_parts_mut(self.base.as_ptr(), self.cap);
                // SAFETY: an unlent buffer's storage is the boxed slice of `cap` bytes
                // made in `with_capacity`, freed once, here.
                drop(unsafe { Box::from_raw(storage) });
            }
        }
    }
}

impl Deref for Buf {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: head + len <= cap, within the storage this buffer owns or borrows.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(self.head), self.len) }
    }
}

impl DerefMut for Buf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(self.head), self.len) }
    }
}

impl Default for Buf {
    fn default() -> Buf {
        Buf::with_capacity(0)
    }
}

impl Clone for Buf {
    /// A heap copy (a lent frame stays with its buffer).
    fn clone(&self) -> Buf {
        let mut b = Buf::with_capacity(self.capacity().max(self.len));
        b.extend_from_slice(self);
        b
    }
}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl PartialEq for Buf {
    fn eq(&self, other: &Buf) -> bool {
        **self == **other
    }
}

impl Eq for Buf {}

impl PartialEq<[u8]> for Buf {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl PartialEq<&[u8]> for Buf {
    fn eq(&self, other: &&[u8]) -> bool {
        **self == **other
    }
}

impl PartialEq<Vec<u8>> for Buf {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == **other
    }
}

impl PartialEq<Buf> for Vec<u8> {
    fn eq(&self, other: &Buf) -> bool {
        **self == **other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for Buf {
    fn eq(&self, other: &[u8; N]) -> bool {
        **self == other[..]
    }
}

impl From<&[u8]> for Buf {
    fn from(bytes: &[u8]) -> Buf {
        Buf::from_slice(bytes)
    }
}

impl From<Vec<u8>> for Buf {
    fn from(bytes: Vec<u8>) -> Buf {
        Buf::from_slice(&bytes)
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for Buf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Mutex;

    /// A store of `n` frames of 256 bytes that records what comes back.
    struct Store {
        mem: Mutex<Vec<u8>>,
        back: Mutex<Vec<u64>>,
    }

    impl FrameStore for Store {
        fn release(&self, id: u64) {
            self.back.lock().unwrap().push(id);
        }
    }

    fn store(n: usize) -> Arc<Store> {
        Arc::new(Store {
            mem: Mutex::new(vec![0; n * 256]),
            back: Mutex::new(Vec::new()),
        })
    }

    fn lend(s: &Arc<Store>, id: u64, head: usize, bytes: &[u8]) -> Buf {
        let base = {
            let mut m = s.mem.lock().unwrap();
            let at = id as usize * 256;
            m[at + head..at + head + bytes.len()].copy_from_slice(bytes);
            NonNull::new(m[at..].as_mut_ptr()).unwrap()
        };
        let dynstore: Arc<dyn FrameStore> = s.clone();
        // SAFETY: frame `id` of the store's memory (which never moves: the Vec is not
        // resized) is used by this buffer alone; the Arc keeps it alive.
        unsafe { Buf::lend(dynstore, id, base, 256, head, bytes.len()) }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(usize, Vec<u8>),
        Remove(usize, usize),
        Extend(Vec<u8>),
        Truncate(usize),
        Resize(usize, u8),
        Push(u8),
        Clear,
        Set(usize, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                any::<usize>(),
                proptest::collection::vec(any::<u8>(), 0..80)
            )
                .prop_map(|(a, b)| Op::Insert(a, b)),
            (any::<usize>(), 0usize..40).prop_map(|(a, n)| Op::Remove(a, n)),
            proptest::collection::vec(any::<u8>(), 0..120).prop_map(Op::Extend),
            (0usize..300).prop_map(Op::Truncate),
            (0usize..400, any::<u8>()).prop_map(|(n, v)| Op::Resize(n, v)),
            any::<u8>().prop_map(Op::Push),
            Just(Op::Clear),
            (any::<usize>(), any::<u8>()).prop_map(|(a, v)| Op::Set(a, v)),
        ]
    }

    fn splice(b: &mut impl Splice, v: &mut Vec<u8>, o: &Op) {
        match o {
            Op::Insert(a, bytes) => {
                let at = a % (v.len() + 1);
                b.insert_at(at, bytes);
                v.insert_at(at, bytes);
            }
            Op::Remove(a, n) => {
                let at = a % (v.len() + 1);
                let n = (*n).min(v.len() - at);
                b.remove_at(at, n);
                v.remove_at(at, n);
            }
            Op::Set(a, x) => {
                if !v.is_empty() {
                    let at = a % v.len();
                    b[at] = *x;
                    v[at] = *x;
                }
            }
            _ => unreachable!(),
        }
    }

    fn run(b: &mut Buf, ops: &[Op]) -> Vec<u8> {
        let mut v = b.to_vec();
        for o in ops {
            match o {
                Op::Extend(x) => {
                    b.extend_from_slice(x);
                    v.extend_from_slice(x);
                }
                Op::Truncate(n) => {
                    b.truncate(*n);
                    v.truncate(*n);
                }
                Op::Resize(n, x) => {
                    b.resize(*n, *x);
                    v.resize(*n, *x);
                }
                Op::Push(x) => {
                    b.push(*x);
                    v.push(*x);
                }
                Op::Clear => {
                    b.clear();
                    v.clear();
                }
                _ => splice(b, &mut v, o),
            }
            assert_eq!(&**b, &v[..], "after {o:?}");
            assert!(b.capacity() >= b.len());
        }
        v
    }

    proptest! {
        #[test]
        fn a_heap_buffer_does_what_a_vec_does(
            start in proptest::collection::vec(any::<u8>(), 0..100),
            ops in proptest::collection::vec(op(), 0..40),
        ) {
            let mut b = Buf::from_slice(&start);
            run(&mut b, &ops);
            let c = b.clone();
            prop_assert_eq!(c, b);
        }

        #[test]
        fn a_lent_buffer_does_what_a_vec_does_and_its_frame_comes_back_once(
            head in 0usize..128,
            start in proptest::collection::vec(any::<u8>(), 0..100),
            ops in proptest::collection::vec(op(), 0..40),
        ) {
            let s = store(4);
            let mut b = lend(&s, 2, head, &start);
            run(&mut b, &ops);
            drop(b);
            prop_assert_eq!(s.back.lock().unwrap().clone(), vec![2]);
        }
    }

    #[test]
    fn a_tag_pushed_after_the_macs_moves_the_front_into_the_headroom() {
        let frame: Vec<u8> = (0..60).collect();
        let mut b = Buf::from_slice(&frame);
        let before = b.as_ptr();
        b.insert_at(12, &[0x81, 0, 0, 10]);
        // The bytes after the MAC addresses did not move.
        // SAFETY: both point into b's storage; the difference is in bytes.
        assert_eq!(unsafe { b.as_ptr().offset_from(before) }, -4);
        assert_eq!(&b[12..16], &[0x81, 0, 0, 10]);
        assert_eq!(&b[16..], &frame[12..]);
        b.remove_at(12, 4);
        assert_eq!(b, frame);
        assert_eq!(b.as_ptr(), before);
    }

    #[test]
    fn a_lent_frame_is_taken_by_its_own_store_alone() {
        let s = store(2);
        let other = store(1);
        let b = lend(&s, 1, 16, b"frame");
        let b = b.take_lent(Arc::as_ptr(&other) as *const ()).unwrap_err();
        let (id, head, len) = b.take_lent(Arc::as_ptr(&s) as *const ()).unwrap();
        assert_eq!((id, head, len), (1, 16, 5));
        // Taken, not released.
        assert!(s.back.lock().unwrap().is_empty());
        // A heap buffer is nobody's.
        let h = Buf::from_slice(b"x");
        assert!(h.take_lent(Arc::as_ptr(&s) as *const ()).is_err());
    }

    #[test]
    fn a_lent_buffer_that_outgrows_its_frame_moves_to_the_heap_and_gives_it_back() {
        let s = store(1);
        let mut b = lend(&s, 0, 190, &[7; 50]);
        b.extend_from_slice(&[8; 10]);
        assert!(b.is_lent());
        b.extend_from_slice(&[9; 10]);
        assert!(!b.is_lent());
        assert_eq!(s.back.lock().unwrap().clone(), vec![0]);
        assert_eq!(b.len(), 70);
        assert_eq!(&b[..50], &[7; 50]);
        assert_eq!(&b[60..], &[9; 10]);
        drop(b);
        assert_eq!(s.back.lock().unwrap().len(), 1);
    }
}
