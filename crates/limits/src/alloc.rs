//! The bytes this process holds right now, counted by the allocator: what makes the memory
//! budget one budget for the whole process rather than one per dataset or tensor.
//!
//! The binary wraps its allocator in [`Counted`]; every allocation adds its size to one
//! counter and every free subtracts it, so [`live_bytes`] is the heap the process holds at
//! this moment, whatever allocated it (a dataset read, a tensor storage, a parsed config). A
//! check before an allocation sized by a file then asks whether *that allocation plus what is
//! already held* fits the budget ([`crate::Budget::admits`]), and what a command frees is
//! returned to the budget without any bookkeeping by the caller. Three datasets of 880 MB each
//! under a 1 GiB budget: the first is read, the second refused.
//!
//! Where no [`Counted`] allocator is installed (unit tests, another binary linking these
//! crates), [`live_bytes`] is `None` and each check holds its own allocation to the budget.
//! Memory that the HDF5 C library allocates itself (its chunk cache) is not counted here; the
//! HDF5 layer adds a filtered dataset's chunk to what it asks for.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Bytes allocated and not yet freed through [`Counted`].
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether a [`Counted`] allocator has served an allocation in this process.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// A global allocator that counts the bytes it holds, around the allocator `A` that does the
/// work: `#[global_allocator] static A: Counted<mimalloc::MiMalloc> = Counted(mimalloc::MiMalloc);`.
///
/// The count is one relaxed atomic add per allocation and free; it never refuses an
/// allocation itself (refusals are errors at the checks, before a file-sized allocation).
pub struct Counted<A>(pub A);

impl<A> Counted<A> {
    fn add(&self, bytes: usize) {
        LIVE.fetch_add(bytes, Ordering::Relaxed);
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
    }

    fn sub(&self, bytes: usize) {
        LIVE.fetch_sub(bytes, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `A`'s with the same arguments and returns its result
// unchanged, so `Counted<A>` keeps each guarantee `A` gives; the counter is only arithmetic on
// the layout's size, done after a successful allocation and before or after a free, and it
// never allocates.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counted<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `layout` are passed on unchanged.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            self.add(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            self.add(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (so by `A`) with `layout`.
        unsafe { self.0.dealloc(ptr, layout) };
        self.sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by `A` with `layout`, and `new_size` meets the caller's
        // guarantees; on failure the old block stays allocated, and so counted.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.sub(layout.size());
            self.add(new_size);
        }
        p
    }
}

/// The heap bytes this process holds now, or `None` when no [`Counted`] allocator counts them.
pub fn live_bytes() -> Option<u64> {
    INSTALLED.load(Ordering::Relaxed).then(|| LIVE.load(Ordering::Relaxed) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    #[test]
    fn the_count_follows_allocations_frees_and_reallocations() {
        let a = Counted(System);
        let before = LIVE.load(Ordering::Relaxed);
        let layout = Layout::from_size_align(1 << 20, 8).unwrap();
        // SAFETY: a non-zero layout; the block is freed with the same layout below.
        let p = unsafe { a.alloc(layout) };
        assert!(!p.is_null());
        assert!(live_bytes().is_some_and(|b| b >= 1 << 20));
        // SAFETY: `p` came from `a` with `layout`; the new size is non-zero.
        let q = unsafe { a.realloc(p, layout, 3 << 20) };
        assert!(!q.is_null());
        let grown = LIVE.load(Ordering::Relaxed);
        // SAFETY: `q` came from `a` with the reallocated layout.
        unsafe { a.dealloc(q, Layout::from_size_align(3 << 20, 8).unwrap()) };
        // Other tests of this binary do not allocate through a `Counted`, so the count is
        // this test's alone.
        assert_eq!(grown - before, 3 << 20);
        assert_eq!(LIVE.load(Ordering::Relaxed), before);
    }
}
