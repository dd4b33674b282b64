//! Detectors: cheap checks for the damage a fault leaves.
//!
//! Each returns whether it fired; the recovery layer decides what to do. Costs: the NaN/Inf
//! checks reduce every tensor to one sum on the device and read back a single number
//! ([`all_finite`]); the loss-spike check is arithmetic on one number; replica divergence hashes
//! every parameter on the host ([`replica_digests`]) and is meant to run every k steps.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use burn::prelude::*;
use resilab_models::{Net, for_each_param};
use resilab_train::Worker;

/// Whether a loss sets off the NaN/Inf-loss detector: not finite, or above `threshold` in
/// magnitude.
pub fn loss_alarm(loss: f64, threshold: f64) -> bool {
    !(loss.is_finite() && loss.abs() <= threshold)
}

/// Whether values whose device reductions gave `sum` and `max_abs` set off the NaN/Inf detector:
/// the sum not finite (a NaN or an infinity reaches it; so does an overflow of huge values) or the
/// largest magnitude above `threshold`. No values (`None`) never do.
pub fn values_alarm(reduced: Option<(f32, f32)>, threshold: f64) -> bool {
    reduced.is_some_and(|(sum, max)| !(sum.is_finite() && f64::from(max) <= threshold))
}

/// [`values_alarm`] for gradients that carry `scale` (fp16): an infinity or a NaN is then the loss
/// scaler's to handle (it skips the step), and `threshold` applies to the unscaled magnitudes.
pub fn gradients_alarm(reduced: Option<(f32, f32)>, scale: Option<f32>, threshold: f64) -> bool {
    let Some(scale) = scale else { return values_alarm(reduced, threshold) };
    reduced.is_some_and(|(sum, max)| {
        let unscaled = f64::from(max) / f64::from(scale);
        sum.is_finite() && (unscaled > threshold || unscaled.is_nan())
    })
}

/// Whether every value of `tensors` is finite: the sum of all values, computed on the device
/// and read back as one number, is finite. (A sum can also overflow when values are merely
/// huge; that counts as not finite, which is the damage detectors look for.)
pub fn all_finite(tensors: impl IntoIterator<Item = Tensor<1>>) -> bool {
    let mut total: Option<Tensor<1>> = None;
    for t in tensors {
        let s = t.sum();
        total = Some(match total {
            Some(acc) => acc + s,
            None => s,
        });
    }
    total.is_none_or(|t| t.into_scalar::<f32>().is_finite())
}

/// Whether every value of `tensors` is finite and at most `threshold` in magnitude (the
/// extreme-value threshold of docs/metrics.md, 1e10 by default): two reductions per tensor on the
/// device, one read-back of two numbers in all.
pub fn all_within(tensors: impl IntoIterator<Item = Tensor<1>>, threshold: f64) -> bool {
    !values_alarm(sum_and_max(tensors), threshold)
}

/// The non-finite and extreme-gradient check on gradients that carry `loss_scale` (fp16):
/// without a scale, [`all_within`]; with one, an infinity or a NaN is the loss scaler's to
/// handle (it skips the step, as in a real fp16 job), and the extreme-value threshold applies
/// to the unscaled magnitudes.
pub fn gradients_within(grads: &resilab_train::Grads, loss_scale: Option<f32>, threshold: f64) -> bool {
    !gradients_alarm(sum_and_max(grads.values().cloned()), loss_scale, threshold)
}

/// The sum of all values of `tensors` and their largest magnitude, reduced on the device and read
/// back as two numbers (`None` without tensors; NaN when the read-back fails).
pub(crate) fn sum_and_max(tensors: impl IntoIterator<Item = Tensor<1>>) -> Option<(f32, f32)> {
    let mut acc: Option<(Tensor<1>, Tensor<1>)> = None;
    for t in tensors {
        let (s, m) = (t.clone().sum(), t.abs().max());
        acc = Some(match acc {
            Some((a, b)) => (a + s, b.max_pair(m)),
            None => (s, m),
        });
    }
    let (s, m) = acc?;
    let v = Tensor::cat(vec![s, m], 0).into_data().convert::<f32>().try_into_vec::<f32>().unwrap_or_default();
    Some(match v.as_slice() {
        [s, m] => (*s, *m),
        _ => (f32::NAN, f32::NAN),
    })
}

/// Whether every parameter and buffer of `net` is finite.
pub fn weights_finite(net: &Net) -> bool {
    let mut tensors = Vec::new();
    for_each_param(net, |_, t| tensors.push(t.without_autodiff()));
    all_finite(tensors)
}

/// Whether every parameter and buffer of `net` is finite and within `threshold`.
pub fn weights_within(net: &Net, threshold: f64) -> bool {
    !values_alarm(weights_reduced(net), threshold)
}

/// The sum and largest magnitude of `net`'s parameters and buffers ([`sum_and_max`]).
pub(crate) fn weights_reduced(net: &Net) -> Option<(f32, f32)> {
    let mut tensors = Vec::new();
    for_each_param(net, |_, t| tensors.push(t.without_autodiff()));
    sum_and_max(tensors)
}

/// The worst value among some tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Health {
    /// Every value finite and within the threshold.
    Sound,
    /// Every value finite, at least one above the threshold in magnitude.
    Extreme,
    /// At least one NaN or ±Inf.
    NonFinite,
}

/// The worst value of `tensors` against `threshold`: two reductions per tensor on the device
/// (sum, which NaN reaches, and max magnitude) and one read-back.
pub fn health(tensors: impl IntoIterator<Item = Tensor<1>>, threshold: f64) -> Health {
    sum_and_max(tensors).map_or(Health::Sound, |(s, m)| judge(s, m, threshold))
}

/// The health that a sum (which NaN reaches) and a largest magnitude of some values show.
fn judge(sum: f32, max: f32, threshold: f64) -> Health {
    if !max.is_finite() || sum.is_nan() {
        Health::NonFinite
    } else if f64::from(max) > threshold {
        Health::Extreme
    } else {
        Health::Sound
    }
}

/// A worker's whole trained state: parameters, buffers (batch-norm running statistics) and
/// optimizer state.
fn state_tensors(worker: &Worker) -> Vec<Tensor<1>> {
    let mut tensors = Vec::new();
    for_each_param(&worker.net, |_, t| tensors.push(t.without_autodiff()));
    tensors.extend(worker.optim.params.values().flat_map(|p| p.buffers.values().cloned()));
    tensors
}

/// The worst value of a worker's whole trained state (see [`state_tensors`]).
pub fn state_health(worker: &Worker, threshold: f64) -> Health {
    health(state_tensors(worker), threshold)
}

/// N-EV decided by the outcome of continued training (docs/metrics.md), never by the injected
/// values: the run is N-EV when its last step's loss is NaN/Inf, or when a parameter, buffer
/// or optimizer value at its end is NaN/Inf or above the extreme threshold. A NaN/Inf loss that
/// training recovers from, or an extreme value it washes out (a running statistic, a
/// momentum entry), does not count. A NaN/Inf anywhere in the trained state is absorbing
/// (every later update and running average carries it), so a run may stop there with its
/// outcome already decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// Loss of the last step run (none before the first).
    pub last_loss: Option<f64>,
    /// Steps run since the start at which the state first held a NaN/Inf (0: it did at the start).
    pub collapse_step: Option<u64>,
    /// Health of the state now.
    pub state: Health,
    /// Largest |value| of the state at the start or after any step (`inf` when one was
    /// infinite); a scan that met a NaN is left out.
    pub peak_abs: f64,
}

impl Outcome {
    /// The outcome before any step, from the state's health and largest |value| at the start
    /// (see [`workers_scan`]).
    pub fn start((state, peak): (Health, f64)) -> Self {
        Self {
            last_loss: None,
            collapse_step: (state == Health::NonFinite).then_some(0),
            state,
            peak_abs: if peak.is_nan() { 0.0 } else { peak },
        }
    }

    /// Records step `n` (counted from the start): its loss and the state's health and largest
    /// |value| after it.
    pub fn step(&mut self, n: u64, loss: f64, (state, peak): (Health, f64)) {
        self.last_loss = Some(loss);
        self.state = state;
        if !peak.is_nan() {
            self.peak_abs = self.peak_abs.max(peak);
        }
        if state == Health::NonFinite {
            self.collapse_step.get_or_insert(n);
        }
    }

    /// The outcome is decided: the state holds a NaN/Inf, which no later step removes.
    pub fn decided(&self) -> bool {
        self.state == Health::NonFinite
    }

    /// Training collapsed: NaN/Inf in the state, or a NaN/Inf loss, at the end.
    pub fn collapsed(&self) -> bool {
        self.state == Health::NonFinite || self.last_loss.is_some_and(|l| !l.is_finite())
    }

    /// N-EV: collapsed, or an extreme value in the state, at the end.
    pub fn nev(&self) -> bool {
        self.collapsed() || self.state == Health::Extreme
    }
}

/// The worst value of several workers' whole trained state (see [`state_health`]).
pub fn workers_health(workers: &[Worker], threshold: f64) -> Health {
    workers_scan(workers, threshold).0
}

/// [`workers_health`] and the largest |value| of the state (`inf` when a value is infinite, NaN
/// when the reduction met a NaN): the same two reductions per tensor and one read-back per worker.
pub fn workers_scan(workers: &[Worker], threshold: f64) -> (Health, f64) {
    let mut worst = (Health::Sound, 0.0f64);
    for w in workers {
        let Some((s, m)) = sum_and_max(state_tensors(w)) else { continue };
        let h = judge(s, m, threshold);
        let m = if s.is_nan() { f64::NAN } else { f64::from(m) };
        worst = (worst.0.max(h), if worst.1.is_nan() || m.is_nan() { f64::NAN } else { worst.1.max(m) });
    }
    worst
}

/// What the state holds at the end of a run, per kind of value, read on the host so that every
/// N-EV and NaN verdict can be recomputed from these numbers: the largest finite |value| and the
/// count of NaN/Inf values of the parameters, the buffers (BatchNorm running statistics) and the
/// optimizer state, over every worker.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StateEvidence {
    /// Largest finite |parameter|.
    pub param_max_abs: f64,
    /// Largest finite |buffer value|.
    pub buffer_max_abs: f64,
    /// Largest finite |optimizer value|.
    pub optim_max_abs: f64,
    /// NaN/Inf parameter values.
    pub param_non_finite: u64,
    /// NaN/Inf buffer values.
    pub buffer_non_finite: u64,
    /// NaN/Inf optimizer values.
    pub optim_non_finite: u64,
}

impl StateEvidence {
    /// Whether any value is NaN/Inf.
    pub fn non_finite(&self) -> bool {
        self.param_non_finite + self.buffer_non_finite + self.optim_non_finite > 0
    }

    /// Whether any finite value exceeds `threshold` in magnitude.
    pub fn extreme(&self, threshold: f64) -> bool {
        self.param_max_abs.max(self.buffer_max_abs).max(self.optim_max_abs) > threshold
    }
}

/// Largest finite |value| and NaN/Inf count of `t`, on the host.
fn scan_host(t: Tensor<1>) -> (f64, u64) {
    let data = t.into_data().convert::<f32>();
    let values = data.as_slice::<f32>().unwrap_or(&[]);
    values.iter().fold((0.0f64, 0u64), |(m, n), v| if v.is_finite() { (m.max(f64::from(v.abs())), n) } else { (m, n + 1) })
}

/// The [`StateEvidence`] of `workers`' state.
pub fn state_evidence(workers: &[Worker]) -> StateEvidence {
    let mut e = StateEvidence::default();
    let fold = |max: &mut f64, count: &mut u64, t: Tensor<1>| {
        let (m, n) = scan_host(t);
        *max = max.max(m);
        *count += n;
    };
    for w in workers {
        for_each_param(&w.net, |info, t| {
            let t = t.without_autodiff();
            if info.trainable {
                fold(&mut e.param_max_abs, &mut e.param_non_finite, t);
            } else {
                fold(&mut e.buffer_max_abs, &mut e.buffer_non_finite, t);
            }
        });
        for t in w.optim.params.values().flat_map(|p| p.buffers.values()) {
            fold(&mut e.optim_max_abs, &mut e.optim_non_finite, t.clone());
        }
    }
    e
}

fn yes() -> bool {
    true
}
fn extreme() -> f64 {
    1e10
}

/// Loss-spike detector settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpikeConfig {
    /// Losses in the moving average.
    pub window: usize,
    /// A loss above `factor` times the average is a spike.
    pub factor: f64,
}

/// The `[detect]` section: which detectors run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DetectConfig {
    /// NaN/Inf or extreme loss (one number per worker, free).
    #[serde(default = "yes")]
    pub nan_loss: bool,
    /// NaN/Inf or extreme values in a worker's gradients (two device reductions per tensor and
    /// one read-back per worker).
    #[serde(default = "yes")]
    pub nan_gradients: bool,
    /// NaN/Inf or extreme values in a worker's weights and optimizer state after its update.
    #[serde(default = "yes")]
    pub nan_weights: bool,
    /// Magnitude above which a finite value counts as extreme (docs/metrics.md: 1e10).
    #[serde(default = "extreme")]
    pub extreme_threshold: f64,
    /// Loss spike against a moving average, per worker.
    #[serde(default)]
    pub loss_spike: Option<SpikeConfig>,
    /// Compare the replicas' parameter digests every this many steps (data parallel).
    #[serde(default)]
    pub divergence_every: Option<u64>,
    /// Record every number the detectors threshold, at every step, into the run's
    /// `signals.csv` (loss, gradient, weight and optimizer-state sums and largest magnitudes,
    /// and with more than one replica the replicas' digest agreement, computed every step), so
    /// that `resilab report --detectors` can evaluate other thresholds without training again.
    /// Costs the reductions the enabled detectors skip and a digest of every replica per step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub record_signals: bool,
}

impl Default for DetectConfig {
    fn default() -> Self {
        Self {
            nan_loss: true,
            nan_gradients: true,
            nan_weights: true,
            extreme_threshold: extreme(),
            loss_spike: None,
            divergence_every: None,
            record_signals: false,
        }
    }
}

/// A loss far above its recent average.
#[derive(Clone, Debug)]
pub struct LossSpike {
    window: usize,
    factor: f64,
    recent: VecDeque<f64>,
}

impl LossSpike {
    /// Fires when a loss exceeds `factor` times the mean of the previous `window` losses (only
    /// once `window` losses have been seen). A non-finite loss always fires.
    pub fn new(window: usize, factor: f64) -> Self {
        Self { window: window.max(1), factor, recent: VecDeque::new() }
    }

    /// Records `loss` and says whether it is a spike. A spike does not enter the average.
    pub fn observe(&mut self, loss: f64) -> bool {
        if !loss.is_finite() {
            return true;
        }
        let full = self.recent.len() == self.window;
        let mean = self.recent.iter().sum::<f64>() / self.recent.len().max(1) as f64;
        if full && loss > self.factor * mean {
            return true;
        }
        if full {
            self.recent.pop_front();
        }
        self.recent.push_back(loss);
        false
    }
}

/// XXH3 digest of a network's trainable parameters (names and little-endian f32 values).
/// Buffers are left out: BatchNorm running statistics differ between healthy replicas (each
/// updates them from its own shard), so only the parameters must agree.
pub fn digest(net: &Net) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for_each_param(net, |info, t| {
        if info.trainable {
            h.update(info.name.as_bytes());
            h.update(t.into_data().convert::<f32>().as_bytes());
        }
    });
    h.digest()
}

/// Digests of the replicas' trainable parameters, and the ranks that disagree with the majority digest (ties: with
/// the lowest rank holding a most common digest).
pub fn replica_digests(nets: &[&Net]) -> (Vec<u64>, Vec<usize>) {
    let digests: Vec<u64> = nets.iter().map(|n| digest(n)).collect();
    let mut best = (0usize, 0u64);
    for d in &digests {
        let count = digests.iter().filter(|x| *x == d).count();
        if count > best.0 {
            best = (count, *d);
        }
    }
    let odd = digests.iter().enumerate().filter(|(_, d)| **d != best.1).map(|(r, _)| r).collect();
    (digests, odd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f32]) -> Tensor<1> {
        Tensor::from_data(TensorData::new(v.to_vec(), [v.len()]), &Device::flex())
    }

    #[test]
    fn finiteness_is_one_readback() {
        assert!(all_finite([t(&[1.0, -2.0]), t(&[3.0])]));
        assert!(!all_finite([t(&[1.0]), t(&[f32::NAN])]));
        assert!(!all_finite([t(&[f32::INFINITY, 1.0])]));
        assert!(!all_finite([t(&[3e38, 3e38])]), "an overflowing sum counts as damage");
        assert!(all_finite(Vec::new()));
        assert!(all_within([t(&[1.0, -2.0]), t(&[3.0])], 1e10));
        assert!(!all_within([t(&[1.0, -2e11])], 1e10), "extreme");
        assert!(!all_within([t(&[1.0]), t(&[f32::NAN])], 1e10));
        assert!(!all_within([t(&[f32::NEG_INFINITY])], 1e10));
    }

    #[test]
    fn health_tells_extreme_from_non_finite() {
        assert_eq!(health([t(&[1.0, -2.0]), t(&[3.0])], 1e10), Health::Sound);
        assert_eq!(health([t(&[1.0, -2e11])], 1e10), Health::Extreme);
        assert_eq!(health([t(&[3e38, 3e38])], 1e10), Health::Extreme, "an overflowing sum of finite values is not NaN");
        assert_eq!(health([t(&[1.0]), t(&[f32::NAN])], 1e10), Health::NonFinite);
        assert_eq!(health([t(&[2e11]), t(&[f32::NEG_INFINITY])], 1e10), Health::NonFinite);
        assert_eq!(health(Vec::new(), 1e10), Health::Sound);
        assert!(Health::NonFinite > Health::Extreme && Health::Extreme > Health::Sound);
    }

    #[test]
    fn n_ev_is_decided_at_the_end_of_training() {
        use Health::*;
        // An Inf loss that training recovers from is not N-EV.
        let mut o = Outcome::start((Sound, 1.0));
        for (n, l) in [(1, 1.0), (2, f64::INFINITY), (3, 2.0), (4, 1.5)] {
            o.step(n, l, (Sound, 1.0));
        }
        assert!(!o.nev() && !o.collapsed() && o.collapse_step.is_none());
        // An injected extreme value washed out by training is not N-EV either.
        let mut o = Outcome::start((Extreme, 1.0));
        assert!(o.nev() && !o.decided(), "judged now it would count");
        o.step(1, 1.0, (Extreme, 1.0));
        o.step(2, 1.0, (Sound, 1.0));
        assert!(!o.nev());
        // A NaN loss at the end is, and so is an extreme value left at the end.
        let mut o = Outcome::start((Sound, 1.0));
        o.step(1, f64::NAN, (Sound, 1.0));
        assert!(o.nev() && o.collapsed());
        let mut o = Outcome::start((Sound, 1.0));
        o.step(1, 1.0, (Extreme, 1.0));
        assert!(o.nev() && !o.collapsed());
        // NaN/Inf in the state decides the outcome, at the step where it appeared.
        let mut o = Outcome::start((Sound, 1.0));
        o.step(1, 1.0, (Sound, 1.0));
        o.step(2, f64::NAN, (NonFinite, 1.0));
        assert!(o.decided() && o.nev() && o.collapsed());
        assert_eq!(o.collapse_step, Some(2));
        assert_eq!(Outcome::start((NonFinite, 1.0)).collapse_step, Some(0));
        // The peak keeps the largest |value| seen, infinite ones included, NaN scans left out.
        let mut o = Outcome::start((Sound, 2.0));
        o.step(1, 1.0, (Extreme, 5e11));
        o.step(2, 1.0, (Sound, 3.0));
        o.step(3, 1.0, (NonFinite, f64::NAN));
        assert_eq!(o.peak_abs, 5e11);
        o.step(4, 1.0, (NonFinite, f64::INFINITY));
        assert_eq!(o.peak_abs, f64::INFINITY);
    }

    #[test]
    fn evidence_counts_non_finite_values_and_keeps_the_largest_finite_one() {
        assert_eq!(scan_host(t(&[1.0, -3.0, f32::NAN, f32::INFINITY, 2.0])), (3.0, 2));
        assert_eq!(scan_host(t(&[])), (0.0, 0));
        let e = StateEvidence { param_max_abs: 2e10, ..StateEvidence::default() };
        assert!(e.extreme(1e10) && !e.extreme(3e10) && !e.non_finite());
        let e = StateEvidence { optim_non_finite: 1, ..StateEvidence::default() };
        assert!(e.non_finite() && !e.extreme(1e10));
    }

    #[test]
    fn loss_spikes_fire_against_the_window() {
        let mut d = LossSpike::new(3, 2.0);
        assert!(!d.observe(1.0) && !d.observe(1.1) && !d.observe(0.9));
        assert!(!d.observe(1.9));
        assert!(d.observe(10.0));
        assert!(d.observe(f64::NAN));
        assert!(!d.observe(1.0), "spikes stay out of the average");
    }
}
