//! The process's allocator, and the one `unsafe` call of the binary.
//!
//! Training allocates and frees tensors of the same few sizes every step. glibc's allocator
//! hands blocks this large back to the kernel and faults them in again (7% of a ResNet-20 step
//! on `native`); mimalloc keeps them, except that by default it still purges (decommits) memory
//! that has stayed free for a second, so that buffers of a large batch (16 MB activations at
//! batch 256) are returned and faulted in again a step later: at batch 256, 2 threads, 16% of
//! the process's CPU time was the kernel's (page zeroing), and steps took 7–9% longer. Numbers
//! do not depend on the allocator.
//!
//! It is wrapped in [`resilab_limits::Counted`], which counts the bytes the process holds, so
//! that the memory budget (`RESILAB_MAX_MEMORY`) is one for the whole process: a check before
//! an allocation sized by a file adds what is already held.

#![allow(unsafe_code)]

#[global_allocator]
static ALLOCATOR: resilab_limits::Counted<mimalloc::MiMalloc> = resilab_limits::Counted(mimalloc::MiMalloc);

/// mimalloc's `mi_option_purge_delay`: the 16th entry of `mi_option_t` in both the v2 and the
/// v3 sources that libmimalloc-sys bundles (libmimalloc-sys names the entries around it but not
/// this one). The test below checks that the index reads this option's default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells mimalloc never to purge freed memory: the process keeps its peak footprint (which a
/// training step reaches every step anyway) instead of returning it and faulting it in again.
pub fn keep_freed_memory() {
    // SAFETY: `mi_option_set` stores a value in mimalloc's static option table; any index below
    // `_mi_option_last` is valid, and `PURGE_DELAY` is one (checked by the test). -1 is the
    // value mimalloc documents as "no purging at all". No memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // SAFETY: as in `keep_freed_memory`; reading an option only loads from the same table.
        let default = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        // The purge delay's default is 1000 ms in v3 (10 ms in v2); the entries beside it
        // (eager commit delay, NUMA nodes) default to 1 and 0. (Unless MIMALLOC_PURGE_DELAY is
        // set in the test's environment.)
        assert!(default == 1000 || default == 10, "option {PURGE_DELAY} reads {default}: not mimalloc's purge delay");
        keep_freed_memory();
        // SAFETY: as above.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }, -1);
    }
}
