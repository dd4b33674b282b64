use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// The shuffled order of the training set in one epoch: a pure function of the data seed and
/// the epoch number, so a run resumed at `(epoch, position)` sees exactly the batches it would
/// have seen.
#[derive(Clone, Debug)]
pub struct EpochOrder {
    /// Epoch this order belongs to.
    pub epoch: usize,
    /// A permutation of `0..len`.
    pub indices: Vec<usize>,
}

impl EpochOrder {
    /// The order of `epoch` for a dataset of `len` images.
    pub fn new(seed: u64, epoch: usize, len: usize) -> Self {
        let mut indices: Vec<usize> = (0..len).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (epoch as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        indices.shuffle(&mut rng);
        Self { epoch, indices }
    }

    /// Number of full batches of `batch` images (a last partial batch is dropped, as with
    /// PyTorch's `drop_last=True`, so every step has the same global batch size).
    pub fn batches(&self, batch: usize) -> usize {
        self.indices.len() / batch
    }

    /// Indices of global batch `b`.
    pub fn batch(&self, b: usize, batch: usize) -> &[usize] {
        &self.indices[b * batch..(b + 1) * batch]
    }
}

/// The part of a global batch of `len` images that worker `rank` of `world` processes: contiguous
/// shards whose sizes differ by at most one, the first `len % world` shards one larger (as
/// PyTorch's `DistributedSampler` would split a batch that does not divide evenly).
pub fn shard_range(len: usize, rank: usize, world: usize) -> std::ops::Range<usize> {
    let base = len / world;
    let extra = len % world;
    let start = rank * base + rank.min(extra);
    let size = base + usize::from(rank < extra);
    start..start + size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_a_deterministic_permutation() {
        let a = EpochOrder::new(7, 3, 100);
        let b = EpochOrder::new(7, 3, 100);
        assert_eq!(a.indices, b.indices);
        let mut sorted = a.indices.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_ne!(a.indices, EpochOrder::new(7, 4, 100).indices);
        assert_ne!(a.indices, EpochOrder::new(8, 3, 100).indices);
    }

    #[test]
    fn shards_cover_the_batch_once() {
        for len in [1, 7, 64, 65] {
            for world in 1..=8 {
                let mut next = 0;
                for r in 0..world {
                    let s = shard_range(len, r, world);
                    assert_eq!(s.start, next);
                    next = s.end;
                }
                assert_eq!(next, len);
            }
        }
    }
}
