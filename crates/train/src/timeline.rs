//! The simulated timeline of one data-parallel step, overlapped as DDP and Horovod overlap it.
//!
//! Every worker runs its forward pass, then its backward pass. Backward produces the gradients
//! in reverse layer order, so a bucket (see [`crate::ReducePlan`]) is ready once every
//! contributing worker's backward has passed the earliest layer that has a parameter in it.
//! Buckets are all-reduced one after another on one communication channel, each as soon as it
//! is ready and the previous bucket's all-reduce has ended, so communication overlaps the rest
//! of backward. Each bucket's optimizer update starts when its all-reduce has ended (and the
//! previous bucket's update has), so updates overlap the remaining communication. The step
//! ends with the last bucket's update.
//!
//! A crash at time `t` leaves the job in the state this timeline says: buckets whose
//! all-reduce ended by `t` hold every worker's gradient, the bucket in flight holds partial
//! sums, later buckets were never reduced ([`Timeline::completed_buckets`]).

use serde::{Deserialize, Serialize};

/// When one bucket's work happens, in simulated seconds from the step's start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct BucketTimes {
    /// Every contributing worker's gradients of the bucket are ready.
    pub ready_s: f64,
    /// The all-reduce starts.
    pub reduce_start_s: f64,
    /// The all-reduce ends: the reduced gradients are on every worker.
    pub reduce_end_s: f64,
    /// The bucket's optimizer update starts.
    pub update_start_s: f64,
    /// The bucket's optimizer update ends.
    pub update_end_s: f64,
}

/// The phases of a data-parallel step that a crash can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "phase", content = "bucket")]
pub enum Phase {
    /// The worker's forward pass.
    Forward,
    /// The worker's backward pass.
    Backward,
    /// Bucket k's all-reduce.
    Allreduce(usize),
    /// Bucket k's optimizer update.
    Update(usize),
}

/// What a timeline is built from: the seconds of each piece of work.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepCosts {
    /// Seconds before the forward passes start (DDP's buffer broadcast).
    pub start_s: f64,
    /// Per worker: forward seconds, or `None` for a worker that does not compute this step.
    pub forward_s: Vec<Option<f64>>,
    /// Per worker: backward seconds (ignored where `forward_s` is `None`).
    pub backward_s: Vec<f64>,
    /// Per bucket: the share of backward done when its gradients are ready (increasing, in
    /// `(0, 1]`).
    pub ready_frac: Vec<f64>,
    /// Per bucket: all-reduce seconds.
    pub reduce_s: Vec<f64>,
    /// Per bucket: update seconds (the workers update in parallel).
    pub update_s: Vec<f64>,
    /// Per bucket: the all-reduce starts no earlier than this (a re-reduce after a crash).
    pub not_before_s: Vec<f64>,
}

impl Phase {
    /// The phase's name: `forward`, `backward`, `allreduce` or `update`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Allreduce(_) => "allreduce",
            Phase::Update(_) => "update",
        }
    }
}

impl StepCosts {
    /// The costs once a worker crashed at `at_s` with `completed` buckets reduced: the bucket
    /// in flight and the later ones are reduced again, over the survivors (`survivor_reduce_s`
    /// per bucket), no earlier than the crash. The crashed worker's earlier work stands.
    pub fn after_crash(&self, at_s: f64, completed: usize, survivor_reduce_s: &[f64]) -> Self {
        let mut c = self.clone();
        c.not_before_s.resize(c.reduce_s.len(), 0.0);
        for k in completed..c.reduce_s.len() {
            c.reduce_s[k] = survivor_reduce_s.get(k).copied().unwrap_or(c.reduce_s[k]);
            c.not_before_s[k] = c.not_before_s[k].max(at_s);
        }
        c
    }
}

/// The simulated timeline of one data-parallel step.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Timeline {
    /// When the forward passes start (after DDP's buffer broadcast).
    pub start_s: f64,
    /// Per worker: end of its forward pass (`None`: it does not compute this step).
    pub forward_end_s: Vec<Option<f64>>,
    /// Per worker: end of its backward pass.
    pub backward_end_s: Vec<Option<f64>>,
    /// The buckets in reduction order.
    pub buckets: Vec<BucketTimes>,
    /// The end of the step: the last update, or the last backward when there is no bucket.
    pub end_s: f64,
}

impl Timeline {
    /// The timeline of `costs`.
    pub fn build(costs: &StepCosts) -> Self {
        let start = costs.start_s;
        let forward_end: Vec<Option<f64>> = costs.forward_s.iter().map(|f| f.map(|f| start + f)).collect();
        let backward_end: Vec<Option<f64>> = forward_end.iter().zip(&costs.backward_s).map(|(f, b)| f.map(|f| f + b)).collect();
        let mut buckets = Vec::with_capacity(costs.ready_frac.len());
        let (mut reduce_free, mut update_free) = (start, start);
        for (k, frac) in costs.ready_frac.iter().enumerate() {
            let ready = forward_end.iter().zip(&costs.backward_s).filter_map(|(f, b)| f.map(|f| f + frac * b)).fold(start, f64::max);
            let not_before = costs.not_before_s.get(k).copied().unwrap_or(0.0);
            let reduce_start = ready.max(reduce_free).max(not_before);
            let reduce_end = reduce_start + costs.reduce_s.get(k).copied().unwrap_or(0.0);
            let update_start = reduce_end.max(update_free);
            let update_end = update_start + costs.update_s.get(k).copied().unwrap_or(0.0);
            (reduce_free, update_free) = (reduce_end, update_end);
            buckets.push(BucketTimes {
                ready_s: ready,
                reduce_start_s: reduce_start,
                reduce_end_s: reduce_end,
                update_start_s: update_start,
                update_end_s: update_end,
            });
        }
        let last_backward = backward_end.iter().flatten().copied().fold(start, f64::max);
        Self { start_s: start, forward_end_s: forward_end, backward_end_s: backward_end, buckets, end_s: update_free.max(last_backward) }
    }

    /// Buckets whose all-reduce has ended at time `t`: their reduced gradients reached every
    /// worker. Buckets are reduced in order, so these are the first ones.
    pub fn completed_buckets(&self, t: f64) -> usize {
        self.buckets.iter().take_while(|b| b.reduce_end_s <= t).count()
    }

    /// The middle of `phase` on worker `rank`'s timeline (bucket indices past the last bucket
    /// name the last one); 0 when the worker does not compute.
    pub fn phase_mid(&self, rank: usize, phase: Phase) -> f64 {
        let mid = |a: f64, b: f64| a + 0.5 * (b - a);
        let last = self.buckets.len().saturating_sub(1);
        let bucket = |k: usize| self.buckets.get(k.min(last)).copied().unwrap_or_default();
        match phase {
            Phase::Forward => self.forward_end_s.get(rank).copied().flatten().map_or(0.0, |f| mid(self.start_s, f)),
            Phase::Backward => match (self.forward_end_s.get(rank).copied().flatten(), self.backward_end_s.get(rank).copied().flatten()) {
                (Some(f), Some(b)) => mid(f, b),
                _ => 0.0,
            },
            Phase::Allreduce(k) => mid(bucket(k).reduce_start_s, bucket(k).reduce_end_s),
            Phase::Update(k) => mid(bucket(k).update_start_s, bucket(k).update_end_s),
        }
    }

    /// What worker `rank` was doing at time `t`: its forward pass (DDP's buffer broadcast
    /// included) or backward pass; after its backward, the all-reduce of the bucket in flight
    /// (or of the next one it waits for), else the update under way; past the last update, the
    /// last bucket's update. A worker that does not compute is in the all-reduces and updates.
    pub fn phase_at(&self, rank: usize, t: f64) -> Phase {
        let forward_end = self.forward_end_s.get(rank).copied().flatten();
        let backward_end = self.backward_end_s.get(rank).copied().flatten();
        if forward_end.is_some_and(|f| t < f) {
            return Phase::Forward;
        }
        if backward_end.is_some_and(|b| t < b) {
            return Phase::Backward;
        }
        if let Some(k) = self.buckets.iter().position(|b| t < b.reduce_end_s) {
            return Phase::Allreduce(k);
        }
        let k = self.buckets.iter().position(|b| t < b.update_end_s).unwrap_or(self.buckets.len().saturating_sub(1));
        Phase::Update(k)
    }

    /// Seconds of communication in the step (the broadcast and every all-reduce).
    pub fn comm_s(&self) -> f64 {
        self.start_s + self.buckets.iter().map(|b| b.reduce_end_s - b.reduce_start_s).sum::<f64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> StepCosts {
        StepCosts {
            start_s: 1.0,
            forward_s: vec![Some(10.0), Some(12.0), None],
            backward_s: vec![20.0, 20.0, 0.0],
            ready_frac: vec![0.25, 0.5, 1.0],
            reduce_s: vec![4.0, 4.0, 4.0],
            update_s: vec![1.0, 1.0, 1.0],
            not_before_s: Vec::new(),
        }
    }

    #[test]
    fn a_time_names_the_phase_a_worker_was_in() {
        let t = Timeline::build(&costs());
        // Worker 1: forward 1..13, backward 13..33; reduces end at 22, 27, 37; updates 23, 28, 38.
        assert_eq!(t.phase_at(1, 0.5), Phase::Forward);
        assert_eq!(t.phase_at(1, 12.9), Phase::Forward);
        assert_eq!(t.phase_at(1, 13.0), Phase::Backward);
        assert_eq!(t.phase_at(1, 32.9), Phase::Backward);
        assert_eq!(t.phase_at(1, 33.0), Phase::Allreduce(2));
        assert_eq!(t.phase_at(1, 37.5), Phase::Update(2));
        assert_eq!(t.phase_at(1, 99.0), Phase::Update(2));
        // Worker 0 finished its backward at 31, while bucket 1's all-reduce (23..27) had ended
        // and bucket 2's had not started: it waits for bucket 2.
        assert_eq!(t.phase_at(0, 31.5), Phase::Allreduce(2));
        assert_eq!(t.phase_at(2, 5.0), Phase::Allreduce(0));
        assert_eq!(Phase::Allreduce(2).name(), "allreduce");
    }

    #[test]
    fn buckets_overlap_backward_and_each_other() {
        let t = Timeline::build(&costs());
        // The slower worker (forward ends at 13) gates readiness: 13 + 5, 13 + 10, 13 + 20.
        let ready: Vec<f64> = t.buckets.iter().map(|b| b.ready_s).collect();
        assert_eq!(ready, [18.0, 23.0, 33.0]);
        assert_eq!((t.buckets[0].reduce_start_s, t.buckets[0].reduce_end_s), (18.0, 22.0));
        // Bucket 1 is ready at 23, after bucket 0's all-reduce ended.
        assert_eq!((t.buckets[1].reduce_start_s, t.buckets[1].reduce_end_s), (23.0, 27.0));
        assert_eq!((t.buckets[2].update_start_s, t.buckets[2].update_end_s), (37.0, 38.0));
        assert_eq!(t.end_s, 38.0);
        // Serial (no overlap) would be 1 + 32 + 12 + 3 = 48.
        assert_eq!(t.comm_s(), 13.0);
        assert_eq!(t.completed_buckets(21.9), 0);
        assert_eq!(t.completed_buckets(22.0), 1);
        assert_eq!(t.completed_buckets(100.0), 3);
    }

    #[test]
    fn communication_bound_buckets_queue() {
        let t = Timeline::build(&StepCosts { reduce_s: vec![10.0, 10.0, 10.0], ..costs() });
        let starts: Vec<f64> = t.buckets.iter().map(|b| b.reduce_start_s).collect();
        assert_eq!(starts, [18.0, 28.0, 38.0]);
        assert_eq!(t.end_s, 49.0);
    }

    #[test]
    fn a_re_reduce_waits_for_its_crash() {
        let t = Timeline::build(&StepCosts { not_before_s: vec![0.0, 25.0, 25.0], ..costs() });
        assert_eq!(t.buckets[1].reduce_start_s, 25.0);
        assert_eq!(t.buckets[2].reduce_start_s, 33.0);
    }

    #[test]
    fn phases_name_their_middles() {
        let t = Timeline::build(&costs());
        assert_eq!(t.phase_mid(0, Phase::Forward), 6.0);
        assert_eq!(t.phase_mid(1, Phase::Backward), 23.0);
        assert_eq!(t.phase_mid(0, Phase::Allreduce(1)), 25.0);
        assert_eq!(t.phase_mid(0, Phase::Update(9)), 37.5);
        assert_eq!(t.phase_mid(2, Phase::Forward), 0.0);
    }
}
