//! The summation order of a data-parallel all-reduce: fixed (the same bits for the same
//! configuration and seed), or drawn per step and per attempt of that step, as a GPU job's
//! order varies from run to run and from one execution of a step to the next.
//!
//! Floating-point addition is not associative, so the order in which an all-reduce adds the
//! workers' contributions decides the low bits of the average. A GPU job does not fix it: the
//! collective's algorithm and channels, a relaunched job's new ring, and the kernels that sum
//! with atomics leave it free, so a step that is redone or recomputed after a restart rounds
//! differently from its first execution. Under [`ReductionOrder::Seeded`] resilab draws the
//! order of every bucket's sum from `(reduction seed, step, attempt, bucket)`, where `attempt`
//! counts the executions of that step index in the run (0 for the first): a permutation of the
//! contributions, which in rank order is the order of the sum and in a ring is the order of the
//! ring (chunk `c` is summed starting at the permuted worker `c + 1`).
//!
//! With two contributions the order cannot change a bit: `a + b == b + a` in IEEE arithmetic,
//! and DDP's predivided terms `a / 2 + b / 2` too. Three or more are needed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `train.reduction_order`: whether the all-reduce's summation order is fixed or drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReductionOrder {
    /// Rank order or the ring as `parallel.allreduce` says, the same in every step: the same
    /// configuration and seed give the same bits (the default).
    #[default]
    Fixed,
    /// The order drawn per step, per attempt of that step and per bucket from
    /// `train.reduction_seed`: a redone or recomputed step rounds differently, as on a GPU.
    Seeded,
}

impl ReductionOrder {
    /// Whether this is the default, [`ReductionOrder::Fixed`] (left out of a stored
    /// configuration, so that configurations written before the option keep their text).
    pub fn is_fixed(&self) -> bool {
        *self == ReductionOrder::Fixed
    }

    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            ReductionOrder::Fixed => "fixed",
            ReductionOrder::Seeded => "seeded",
        }
    }
}

/// The order one execution of a step sums in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OrderDraw {
    /// The contributions in rank order (the ring from rank 0).
    #[default]
    Fixed,
    /// A permutation of the contributions drawn from these.
    Seeded {
        /// The reduction seed.
        seed: u64,
        /// The global step (1-based).
        step: u64,
        /// The executions of this step index before this one in the run.
        attempt: u32,
    },
}

impl OrderDraw {
    /// The order of `k` contributions in bucket `bucket` (its index in the plan): `order[i]` is
    /// the rank whose contribution comes `i`-th. `None` under [`OrderDraw::Fixed`] (rank order).
    pub fn permutation(&self, k: usize, bucket: usize) -> Option<Vec<usize>> {
        let OrderDraw::Seeded { seed, step, attempt } = *self else { return None };
        let mut state = mix(mix(mix(mix(seed, step), u64::from(attempt)), bucket as u64), k as u64);
        let mut order: Vec<usize> = (0..k).collect();
        // Fisher-Yates, each index drawn as the high half of a 64 x i product (unbiased to
        // within i / 2^64).
        for i in (1..k).rev() {
            state = splitmix(state);
            let j = ((u128::from(state) * (i as u128 + 1)) >> 64) as usize;
            order.swap(i, j);
        }
        Some(order)
    }
}

/// How many times each step index has been executed in one run: the attempt number of a step's
/// next execution. Kept by the trainer for the run (never in a checkpoint), so a step redone by
/// a rollback, or recomputed after a restart from a checkpoint, counts 1, 2, ...; the steps
/// before a state put in from elsewhere (a checkpoint a run resumed from, a cached golden state)
/// count as executed once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Executions {
    /// Steps `1..=reached` were executed at least once (in this run or before its state).
    reached: u64,
    /// Executions of each step started in this run.
    counts: BTreeMap<u64, u32>,
}

impl Executions {
    /// Executions of `step` so far.
    pub(crate) fn of(&self, step: u64) -> u32 {
        let n = self.counts.get(&step).copied().unwrap_or(0);
        if step <= self.reached { n.max(1) } else { n }
    }

    /// Counts a new execution of `step`; returns its attempt number (the executions before it).
    pub(crate) fn begin(&mut self, step: u64) -> u32 {
        let attempt = self.of(step);
        self.counts.insert(step, attempt.saturating_add(1));
        attempt
    }

    /// The trainer's state was put at step `step` from elsewhere: steps up to it count as
    /// executed.
    pub(crate) fn reached(&mut self, step: u64) {
        self.reached = self.reached.max(step);
    }
}

/// SplitMix64's output function of `x` advanced by its increment (Steele, Lea and Flood, 2014).
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `a` and `b` mixed into one well-spread word.
fn mix(a: u64, b: u64) -> u64 {
    splitmix(splitmix(a) ^ b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeded(seed: u64, step: u64, attempt: u32) -> OrderDraw {
        OrderDraw::Seeded { seed, step, attempt }
    }

    #[test]
    fn executions_count_redos_and_recomputed_steps_and_a_restored_state_counts_once() {
        let mut e = Executions::default();
        assert_eq!((e.begin(1), e.begin(2)), (0, 0));
        // A rollback redoes step 2; a restart to step 0 recomputes 1 and 2.
        assert_eq!(e.begin(2), 1);
        assert_eq!((e.begin(1), e.begin(2), e.begin(3)), (1, 2, 0));
        // A state restored at step 5 (a resumed run, a cached prefix): 4 and 5 were run once
        // before it, 3 as counted, 6 never.
        e.reached(5);
        assert_eq!((e.of(3), e.of(4), e.of(5), e.of(6)), (1, 1, 1, 0));
        assert_eq!((e.begin(4), e.begin(4), e.begin(6)), (1, 2, 0));
        // Restoring an earlier state keeps what was counted.
        e.reached(2);
        assert_eq!(e.of(5), 1);
    }

    #[test]
    fn fixed_draws_no_permutation() {
        assert_eq!(OrderDraw::Fixed.permutation(4, 0), None);
    }

    #[test]
    fn a_draw_is_a_permutation_and_the_same_for_the_same_inputs() {
        for k in 1..9 {
            let p = seeded(7, 3, 1).permutation(k, 2).unwrap();
            let mut sorted = p.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..k).collect::<Vec<_>>());
            assert_eq!(seeded(7, 3, 1).permutation(k, 2).unwrap(), p);
        }
    }

    #[test]
    fn every_order_of_three_is_drawn_about_equally_often() {
        // 6,000 draws over steps: each of the 3! = 6 orders expects 1,000 (binomial SD 29).
        let mut counts = std::collections::BTreeMap::new();
        for step in 0..6000 {
            *counts.entry(seeded(1, step, 0).permutation(3, 0).unwrap()).or_insert(0u32) += 1;
        }
        assert_eq!(counts.len(), 6, "{counts:?}");
        assert!(counts.values().all(|&n| (850..1150).contains(&n)), "{counts:?}");
    }

    #[test]
    fn seed_step_attempt_and_bucket_each_change_the_draw() {
        let base = seeded(5, 10, 0);
        let p = |d: OrderDraw, bucket| d.permutation(8, bucket).unwrap();
        // 8! = 40,320 orders: a repeat by chance is unlikely for these fixed inputs.
        assert_ne!(p(base, 0), p(seeded(6, 10, 0), 0));
        assert_ne!(p(base, 0), p(seeded(5, 11, 0), 0));
        assert_ne!(p(base, 0), p(seeded(5, 10, 1), 0));
        assert_ne!(p(base, 0), p(base, 1));
    }
}
