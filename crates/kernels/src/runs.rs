//! Element-wise passes over long vectors, threaded over fixed runs of values only where the
//! vector is long enough to pay for waking the pool.

use rayon::prelude::*;

/// Values per task.
pub(crate) const RUN: usize = 1 << 14;

/// Vectors shorter than this are processed on the calling thread: the passes are bound by
/// memory, and waking the pool for a few runs costs more than it saves (measured: eight
/// workers' SGD updates of VGG-11/4's parameters took twice as long threaded per run).
pub(crate) const THREADED_FROM: usize = 1 << 18;

/// `f` over the runs of a vector of `n` values: in parallel for long vectors, in order
/// otherwise. Each run's result is the same either way.
pub(crate) fn for_runs<T: Send, I>(n: usize, runs: I, f: impl Fn(T) + Sync + Send)
where
    I: IndexedParallelIterator<Item = T>,
{
    if n >= THREADED_FROM { runs.for_each(f) } else { runs.with_min_len(usize::MAX).for_each(f) }
}
