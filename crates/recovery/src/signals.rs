//! The numbers every detector thresholds, recorded as the guard evaluates them
//! (`[detect] record_signals`), and the detectors evaluated again from those numbers alone.
//!
//! The guard decides from the same numbers it records, through the same predicates
//! (`detect::loss_alarm`, `values_alarm`, `gradients_alarm`), so replaying a run's signals with its
//! own `[detect]` settings ([`replay`]) gives exactly the detections it made (the thresholded
//! kinds: crashes and checkpoint digests have no threshold). Replaying with other settings gives
//! the detections those settings would have made on the same trajectory, which is exact for a run
//! whose strategy does not act on detections (`none`) and an approximation otherwise (a
//! detection that made the run redo, re-sync or restart changed what came after it).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Detection;
use crate::detect::{DetectConfig, LossSpike, gradients_alarm, loss_alarm, values_alarm};

/// What a signal row measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalKind {
    /// A worker's loss (a pipeline's last stage: per micro-batch): `value` is the loss.
    Loss,
    /// A worker's local gradients after backward: `value` their sum, `max_abs` their largest
    /// magnitude (both as the device reduced them, in f32), `scale` the loss scale they carry.
    Gradients,
    /// A worker's parameters and buffers after its update: `value` sum, `max_abs` largest
    /// magnitude.
    Weights,
    /// A worker's optimizer state after its update: `value` sum, `max_abs` largest magnitude.
    Optimizer,
    /// The replicas' parameter digests after a step's updates (data parallel, more than one
    /// replica): `value` the number of replicas that disagree with the majority, `ranks` which.
    Digests,
    /// Worker `rank` left the job for good: the ranks above it move down one.
    Removed,
}

impl SignalKind {
    /// The CSV spelling.
    pub fn name(self) -> &'static str {
        match self {
            SignalKind::Loss => "loss",
            SignalKind::Gradients => "gradients",
            SignalKind::Weights => "weights",
            SignalKind::Optimizer => "optimizer",
            SignalKind::Digests => "digests",
            SignalKind::Removed => "removed",
        }
    }
}

/// One evaluation of a detector's signal, in the order the guard made them (a row of
/// `signals.csv`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignalRow {
    /// The step (1-based).
    pub step: u64,
    /// 0 for the step's first execution, then 1, 2, ... for each redo.
    pub attempt: u32,
    /// Worker or stage.
    pub rank: usize,
    /// The micro-batch of a pipeline's last-stage loss.
    pub micro: Option<usize>,
    /// What was measured.
    pub signal: SignalKind,
    /// The loss, a sum of values, or a count of disagreeing replicas (see [`SignalKind`]).
    pub value: f64,
    /// The largest magnitude (tensor signals).
    pub max_abs: Option<f64>,
    /// The loss scale the gradients carry (fp16).
    pub scale: Option<f32>,
    /// The disagreeing replicas, `;`-separated (digests).
    pub ranks: Option<String>,
}

/// Measured seconds of the tensor signals' device reductions and digests, and how many times each
/// was computed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SignalCosts {
    /// Per signal (`gradients`, `weights`, `optimizer`, `digests`): total seconds and count.
    pub by_signal: BTreeMap<String, (f64, u64)>,
}

impl SignalCosts {
    /// Adds one computation of `kind` that took `took`.
    pub fn add(&mut self, kind: SignalKind, took: Duration) {
        let e = self.by_signal.entry(kind.name().to_string()).or_insert((0.0, 0));
        e.0 += took.as_secs_f64();
        e.1 += 1;
    }
}

/// The rows and costs a guard records while `[detect] record_signals` is on.
#[derive(Clone, Debug, Default)]
pub struct SignalLog {
    /// Every evaluation, in order.
    pub rows: Vec<SignalRow>,
    /// What computing them cost.
    pub costs: SignalCosts,
    /// The replicas' digests taken so far in the step and attempt `digests_at`.
    digests: BTreeMap<usize, u64>,
    digests_at: (u64, u32),
}

impl SignalLog {
    /// Adds replica `rank`'s digest `d` after its update in `step`'s `attempt`; the digests of
    /// an earlier step or attempt (which a replica that crashed or stopped early left) are
    /// dropped first.
    pub(crate) fn digest(&mut self, step: u64, attempt: u32, rank: usize, d: u64) {
        if self.digests_at != (step, attempt) {
            self.digests.clear();
            self.digests_at = (step, attempt);
        }
        self.digests.insert(rank, d);
    }

    /// The digests taken so far in the current step and attempt, leaving none.
    pub(crate) fn take_digests(&mut self) -> BTreeMap<usize, u64> {
        std::mem::take(&mut self.digests)
    }
}

/// A detection made again from recorded signals: the step, worker and kind of a
/// [`crate::DetectionRecord`] (the rank is `None` where the run's record has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alarm {
    /// Step.
    pub step: u64,
    /// Attempt of the step.
    pub attempt: u32,
    /// Worker or stage.
    pub rank: Option<usize>,
    /// What fired.
    pub kind: Detection,
}

/// The detections `detect` makes on `rows`, in order, as the guard makes them: per loss row the
/// NaN/Inf-loss check and then (if it did not fire) the loss-spike window of that rank; per
/// gradient row the gradient check; per weights row the weights-and-optimizer check (the
/// optimizer row that follows it belongs to the same check); per digests row at a step that is a
/// multiple of `divergence_every`, a divergence when replicas disagree.
pub fn replay(rows: &[SignalRow], detect: &DetectConfig) -> Vec<Alarm> {
    let mut spikes: BTreeMap<usize, LossSpike> = BTreeMap::new();
    let mut out = Vec::new();
    let t = detect.extreme_threshold;
    let mut i = 0;
    while i < rows.len() {
        let r = &rows[i];
        let alarm = |kind, rank| Alarm { step: r.step, attempt: r.attempt, rank, kind };
        let reduced = r.max_abs.map(|m| (r.value as f32, m as f32));
        match r.signal {
            SignalKind::Loss => {
                let rank = r.micro.is_none().then_some(r.rank);
                if detect.nan_loss && loss_alarm(r.value, t) {
                    out.push(alarm(Detection::NonFiniteLoss, rank));
                } else if let Some(s) = &detect.loss_spike
                    && spikes.entry(r.rank).or_insert_with(|| LossSpike::new(s.window, s.factor)).observe(r.value)
                {
                    out.push(alarm(Detection::LossSpike, rank));
                }
            }
            SignalKind::Gradients => {
                if detect.nan_gradients && gradients_alarm(reduced, r.scale, t) {
                    out.push(alarm(Detection::NonFiniteGradients, Some(r.rank)));
                }
            }
            SignalKind::Weights => {
                let optim = rows.get(i + 1).filter(|o| o.signal == SignalKind::Optimizer && o.step == r.step && o.rank == r.rank);
                let optim_reduced = optim.and_then(|o| o.max_abs.map(|m| (o.value as f32, m as f32)));
                if detect.nan_weights && (values_alarm(reduced, t) || values_alarm(optim_reduced, t)) {
                    out.push(alarm(Detection::NonFiniteWeights, Some(r.rank)));
                }
                i += usize::from(optim.is_some());
            }
            SignalKind::Optimizer => {}
            SignalKind::Digests => {
                if detect.divergence_every.is_some_and(|k| r.step.is_multiple_of(k)) && r.value > 0.0 {
                    let first = r.ranks.as_deref().and_then(|s| s.split(';').next()).and_then(|s| s.parse().ok());
                    out.push(alarm(Detection::ReplicaDivergence, first));
                }
            }
            SignalKind::Removed => {
                spikes = std::mem::take(&mut spikes)
                    .into_iter()
                    .filter(|(k, _)| *k != r.rank)
                    .map(|(k, s)| (if k > r.rank { k - 1 } else { k }, s))
                    .collect();
            }
        }
        i += 1;
    }
    out
}

/// The detection kinds [`replay`] can make (those with a threshold or a schedule).
pub fn replayable(kind: Detection) -> bool {
    matches!(
        kind,
        Detection::NonFiniteLoss
            | Detection::LossSpike
            | Detection::NonFiniteGradients
            | Detection::NonFiniteWeights
            | Detection::ReplicaDivergence
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SpikeConfig;

    fn row(step: u64, rank: usize, signal: SignalKind, value: f64, max_abs: Option<f64>) -> SignalRow {
        SignalRow { step, attempt: 0, rank, micro: None, signal, value, max_abs, scale: None, ranks: None }
    }

    #[test]
    fn predicates_match_the_detectors_rules() {
        assert!(!loss_alarm(2.3, 1e10) && loss_alarm(f64::NAN, 1e10) && loss_alarm(2e10, 1e10) && loss_alarm(-3.0, 2.0));
        assert!(!values_alarm(None, 1e10), "no values, no alarm");
        assert!(!values_alarm(Some((1.0, 2.0)), 1e10));
        assert!(values_alarm(Some((f32::NAN, 2.0)), 1e10) && values_alarm(Some((f32::INFINITY, 2.0)), 1e10));
        assert!(values_alarm(Some((1.0, 2e10)), 1e10) && values_alarm(Some((1.0, 3.0)), 2.0));
        // fp16: non-finite gradients are the scaler's; the threshold applies to unscaled values.
        assert!(!gradients_alarm(Some((f32::INFINITY, f32::INFINITY)), Some(1024.0), 1e10));
        assert!(gradients_alarm(Some((1.0, 2048.0)), Some(1024.0), 1.5));
        assert!(!gradients_alarm(Some((1.0, 1024.0)), Some(1024.0), 1.5));
        assert!(gradients_alarm(Some((f32::NAN, 1.0)), None, 1e10));
    }

    #[test]
    fn replay_follows_the_guards_order_and_windows() {
        let mut rows = vec![];
        for (s, l) in [(1, 1.0), (2, 1.0), (3, 5.0), (4, f64::NAN)] {
            rows.push(row(s, 0, SignalKind::Loss, l, None));
            rows.push(row(s, 1, SignalKind::Loss, 1.0, None));
        }
        rows.push(row(4, 0, SignalKind::Gradients, 1.0, Some(3e10)));
        rows.push(row(4, 0, SignalKind::Weights, 1.0, Some(1.0)));
        rows.push(row(4, 0, SignalKind::Optimizer, f64::NAN, Some(1.0)));
        rows.push(SignalRow { ranks: Some("1;2".into()), ..row(4, 2, SignalKind::Digests, 2.0, None) });
        rows.push(SignalRow { ranks: Some("1".into()), ..row(5, 2, SignalKind::Digests, 1.0, None) });
        let detect =
            DetectConfig { loss_spike: Some(SpikeConfig { window: 2, factor: 2.0 }), divergence_every: Some(2), ..DetectConfig::default() };
        let got: Vec<(u64, Option<usize>, Detection)> = replay(&rows, &detect).into_iter().map(|a| (a.step, a.rank, a.kind)).collect();
        assert_eq!(
            got,
            [
                (3, Some(0), Detection::LossSpike),
                (4, Some(0), Detection::NonFiniteLoss),
                (4, Some(0), Detection::NonFiniteGradients),
                (4, Some(0), Detection::NonFiniteWeights),
                (4, Some(1), Detection::ReplicaDivergence),
            ]
        );
        // Without the NaN-loss check the spike window sees the NaN (and fires on it).
        let quiet = DetectConfig { nan_loss: false, nan_gradients: false, nan_weights: false, ..detect };
        let got: Vec<Detection> = replay(&rows, &quiet).into_iter().map(|a| a.kind).collect();
        assert_eq!(got, [Detection::LossSpike, Detection::LossSpike, Detection::ReplicaDivergence]);
    }

    #[test]
    fn a_removed_rank_takes_its_window_away() {
        let spike = DetectConfig { loss_spike: Some(SpikeConfig { window: 1, factor: 2.0 }), ..DetectConfig::default() };
        let rows = vec![
            row(1, 0, SignalKind::Loss, 1.0, None),
            row(1, 1, SignalKind::Loss, 10.0, None),
            row(2, 0, SignalKind::Removed, 0.0, None),
            // Rank 1 is now rank 0, with rank 1's window (10): 15 is no spike against it.
            row(2, 0, SignalKind::Loss, 15.0, None),
        ];
        assert!(replay(&rows, &spike).is_empty());
        let kept = [rows[0].clone(), rows[1].clone(), rows[3].clone()];
        assert_eq!(replay(&kept, &spike).len(), 1, "without the removal rank 0's window (1) sees a spike");
    }
}
