//! Element-wise passes over long vectors, threaded over fixed runs of values only where the
//! vector is long enough to pay for waking the pool.

use rayon::prelude::*;

/// Values per task.
pub(crate) const RUN: usize = 1 << 14;

/// Vectors shorter than this are processed on the calling thread: the passes are bound by
/// memory, and waking the pool for a few runs costs more than it saves. Measured on eight
/// workers' SGD-momentum updates at 2 threads (`resilab bench parallel`, update column), against
/// 2^18: from 2^17, AlexNet/2's 8.4 -> 7.5 ms and VGG-11/4's 4.4 -> 4.0 ms (their 131k-221k
/// parameter tensors now split), ResNet-20's unchanged (none of its tensors reaches 2^17);
/// from 2^15, ResNet-20's 6.2 -> 6.7 ms, as its 37k-value tensors paid for the wake-up.
pub(crate) const THREADED_FROM: usize = 1 << 17;

/// `f` over the runs of a vector of `n` values: in parallel for long vectors, in order
/// otherwise. Each run's result is the same either way.
pub(crate) fn for_runs<T: Send, I>(n: usize, runs: I, f: impl Fn(T) + Sync + Send)
where
    I: IndexedParallelIterator<Item = T>,
{
    if n >= THREADED_FROM { runs.for_each(f) } else { runs.with_min_len(usize::MAX).for_each(f) }
}
