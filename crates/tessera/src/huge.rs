//! The process's allocator: large blocks on huge pages.
//!
//! A forwarding table is read at random, a cache line here and one there over megabytes:
//! on 4 KiB pages nearly every lookup step also misses the TLB, which DPDK avoids by
//! putting its tables on 2 MiB huge pages. Here every allocation of 2 MiB or more (the
//! forwarding tables' arrays, chiefly) is mapped on its own, placed on a 2 MiB
//! boundary and advised for transparent huge pages (`MADV_HUGEPAGE`), so that the kernel
//! backs it with huge pages where it can; smaller ones go to the system allocator as
//! before. Nothing needs reserving: where transparent huge pages are off
//! (`/sys/kernel/mm/transparent_hugepage/enabled` is `never`), the advice is ignored and the
//! memory is ordinary pages. `tessera bench fib` reports how much of the table the kernel
//! gave huge pages (`poptrie_huge_pages_kib`).
//!
//! Measured with `tessera bench fib --dpdk --table ../shared/data/ipv6-bgp-2023.txt.gz`,
//! five runs each way alternating (DPDK on huge pages both ways), random-prefix workload:
//! Poptrie6's single lookups 15.5-29.2 M/s on huge pages against 13.2-16.9 without, its
//! batch 1.20-1.47 times rte_fib6's batch (mean 1.33) against 1.11-1.34 (mean 1.20).

use std::alloc::{GlobalAlloc, Layout, System};

/// The huge page size, and the smallest block mapped on its own.
pub const HUGE: usize = 2 << 20;

/// Blocks of at least [`HUGE`] bytes (and alignment at most that) are anonymous mappings
/// of whole huge pages on a huge page boundary; the rest are [`System`]'s.
pub struct HugeAlloc;

fn ours(l: Layout) -> bool {
    l.size() >= HUGE && l.align() <= HUGE
}

/// Maps `size` bytes (a multiple of [`HUGE`]) on a [`HUGE`] boundary, advised for huge
/// pages; null if the kernel refuses. The memory is zeroed (anonymous).
fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping of our own; checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size + HUGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let start = p as usize;
    let at = start.next_multiple_of(HUGE);
    let end = start + size + HUGE;
    // SAFETY: the head and the tail unmapped lie inside the mapping just made and outside
    // [at, at + size), which is all that is kept.
    unsafe {
        if at > start {
            libc::munmap(p, at - start);
        }
        if end > at + size {
            libc::munmap((at + size) as *mut libc::c_void, end - at - size);
        }
        // Advice only: it changes no contents, and fails harmlessly where THP is absent.
        libc::madvise(at as *mut libc::c_void, size, libc::MADV_HUGEPAGE);
    }
    at as *mut u8
}

// SAFETY: every block is either System's (and returned to it) or a mapping of its own,
// made by `map` for a layout that `ours` accepts and unmapped, whole, for the same layout:
// `ours` depends on the layout alone, which the caller passes unchanged to `dealloc`.
unsafe impl GlobalAlloc for HugeAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ours(l) {
            map(l.size().next_multiple_of(HUGE))
        } else {
            // SAFETY: the caller's contract, passed on.
            unsafe { System.alloc(l) }
        }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if ours(l) {
            // Anonymous memory is zero already: no page is touched.
            map(l.size().next_multiple_of(HUGE))
        } else {
            // SAFETY: the caller's contract, passed on.
            unsafe { System.alloc_zeroed(l) }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if ours(l) {
            // SAFETY: `p` is a mapping `map` made for this layout's rounded size.
            unsafe { libc::munmap(p as *mut libc::c_void, l.size().next_multiple_of(HUGE)) };
        } else {
            // SAFETY: the caller's contract, passed on.
            unsafe { System.dealloc(p, l) }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `new_size` is non-zero and fits with `l.align()`.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, l.align()) };
        match (ours(l), ours(new)) {
            // SAFETY: the caller's contract, passed on.
            (false, false) => unsafe { System.realloc(p, l, new_size) },
            // A mapping of our own that already has room: it stays where it is.
            (true, true) if new_size.next_multiple_of(HUGE) == l.size().next_multiple_of(HUGE) => p,
            _ => {
                // SAFETY: `new` is a valid non-zero layout (above).
                let q = unsafe { self.alloc(new) };
                if !q.is_null() {
                    // SAFETY: both blocks are live, distinct and at least this long.
                    unsafe {
                        std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                        self.dealloc(p, l);
                    }
                }
                q
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_sit_on_huge_page_boundaries_and_keep_their_contents() {
        let mut v: Vec<u64> = vec![0; HUGE / 8 + 1];
        assert_eq!(v.as_ptr() as usize % HUGE, 0, "a zeroed large vector");
        assert!(v.iter().all(|&x| x == 0));
        v.iter_mut().enumerate().for_each(|(i, x)| *x = i as u64);
        // Growth within the mapping keeps the block; past it, moves it whole.
        v.reserve_exact(100);
        v.extend(0..100);
        v.reserve_exact(HUGE);
        assert_eq!(v.as_ptr() as usize % HUGE, 0, "grown");
        assert!(v[..HUGE / 8 + 1]
            .iter()
            .enumerate()
            .all(|(i, &x)| x == i as u64));
        // Shrunk below the threshold, it goes back to the system allocator.
        v.truncate(10);
        v.shrink_to_fit();
        assert_eq!(v, (0..10).collect::<Vec<u64>>());
        let small = vec![7u8; 1000];
        assert_eq!(small.iter().map(|&x| x as usize).sum::<usize>(), 7000);
    }
}
