//! The guard: one [`Hooks`] implementation that injects the scheduled faults, runs the
//! detectors, asks the strategy what to do and carries out what can be done inside a step
//! (drop a contribution, redo the step, re-sync or respawn a replica). Restarting from a
//! checkpoint and failing the run end the step with [`Control::Stop`] and leave the decision in
//! [`Guard::pending`] for the runner.
//!
//! No oracle: detection and every decision use only what a real job observes (losses,
//! gradients, weights and optimizer state, digests, a worker that stops answering), step
//! numbers and attempt counts. The fault injector's log is read for measurement only (each
//! detection's latency); `FaultInjector::withhold_log` empties it and the decisions stay the
//! same (tested in the runner).

use std::collections::{BTreeMap, BTreeSet};

use crate::detect::{LossSpike, all_within, digest, weights_within};
use resilab_faults::FaultInjector;
use resilab_train::{Activation, Control, Crash, Ctx, Grads, Hooks, LossInfo, Message, Point, Timeline, Worker};
use serde::{Deserialize, Serialize};

use crate::{Decision, Detection, Situation, Strategy, decide};

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
        }
    }
}

/// One detection.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DetectionRecord {
    /// Step during which it fired.
    pub step: u64,
    /// Worker or stage (none for a check across workers that found no culprit).
    pub rank: Option<usize>,
    /// What fired.
    pub kind: Detection,
    /// Where in the step (`None`: while loading a checkpoint).
    pub point: Option<Point>,
    /// Steps since the most recent fault injected before it (on any worker), if any.
    pub latency_steps: Option<u64>,
    /// What the strategy decided.
    pub decision: Decision,
    /// A crash's all-reduce buckets: those whose all-reduce had completed, and all of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<[usize; 2]>,
}

/// The detections of a run in words: how many, on how many steps, and by what. A detector fires
/// on every step (and for every worker) where its condition holds, so a NaN left in place is
/// detected again each step.
pub fn detections_text(records: &[DetectionRecord]) -> String {
    if records.is_empty() {
        return "0 detections".to_string();
    }
    let steps: std::collections::BTreeSet<u64> = records.iter().map(|r| r.step).collect();
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for r in records {
        let name = r.kind.name();
        match kinds.iter_mut().find(|(k, _)| *k == name) {
            Some((_, n)) => *n += 1,
            None => kinds.push((name, 1)),
        }
    }
    let by: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} x{n}")).collect();
    format!(
        "{} detection(s) on {} step(s) ({}; a detector fires on each step its condition holds)",
        records.len(),
        steps.len(),
        by.join(", ")
    )
}

/// Faults, detectors and a strategy, as the training hooks.
pub struct Guard {
    /// The scheduled faults.
    pub faults: FaultInjector,
    /// The strategy.
    pub strategy: Strategy,
    /// Detector settings.
    pub detect: DetectConfig,
    /// Every detection, in order.
    pub detections: Vec<DetectionRecord>,
    /// A decision the runner must carry out (restart from a checkpoint, fall back, fail);
    /// the step that made it ended with [`Control::Stop`].
    pub pending: Option<Decision>,
    /// Whether a step redone without crashed workers spreads their samples over the survivors
    /// (`[recovery] rebalance`: the global batch is kept) rather than dropping them.
    pub rebalance: bool,
    /// Bytes of state sent to each worker respawned from a healthy replica since the runner
    /// last took them ([`Guard::take_transfers`]), for the simulated clock.
    transfers: Vec<u64>,
    /// Replicas (data-parallel workers; 1 for a single worker or a pipeline).
    replicas: usize,
    spikes: BTreeMap<usize, LossSpike>,
    digests: BTreeMap<usize, u64>,
    /// Workers seen to stop answering and not yet brought back.
    down: BTreeSet<usize>,
    /// `(rank, donor, step)` to re-sync before the rank's first forward pass of a step after
    /// `step` (a crashed worker rejoins at the next step, not in a redo of its crash step).
    resync_next: Vec<(usize, usize, u64)>,
    /// `(rank, donor)` to re-sync once the donor has taken this step's update.
    resync_now: Vec<(usize, usize)>,
    donors: BTreeMap<usize, Worker>,
}

impl Guard {
    /// A guard for `replicas` data-parallel replicas (1 for a pipeline).
    pub fn new(faults: FaultInjector, strategy: Strategy, detect: DetectConfig, replicas: usize) -> Self {
        Self {
            faults,
            strategy,
            detect,
            detections: Vec::new(),
            pending: None,
            rebalance: false,
            transfers: Vec::new(),
            replicas,
            spikes: BTreeMap::new(),
            digests: BTreeMap::new(),
            down: BTreeSet::new(),
            resync_next: Vec::new(),
            resync_now: Vec::new(),
            donors: BTreeMap::new(),
        }
    }

    /// Workers seen to crash and not yet brought back.
    pub fn down(&self) -> &BTreeSet<usize> {
        &self.down
    }

    /// Brings every crashed worker back (the runner restored the state of all workers).
    pub fn respawn_all(&mut self) {
        for r in std::mem::take(&mut self.down) {
            self.faults.respawn(r);
        }
        self.resync_next.clear();
    }

    /// The job went on without worker `rank` for good (the runner removed it from the
    /// trainer): the injector drops its faults, and every rank above it moves down one in the
    /// guard's records, as the workers did. Re-syncs waiting for it are dropped; those that
    /// would copy from it copy from the lowest replica left instead.
    pub fn remove_rank(&mut self, rank: usize) {
        let shift = |r: usize| if r > rank { r - 1 } else { r };
        self.faults.remove_rank(rank);
        self.replicas = self.replicas.saturating_sub(1);
        self.down = self.down.iter().filter(|&&r| r != rank).map(|&r| shift(r)).collect();
        self.spikes = std::mem::take(&mut self.spikes).into_iter().filter(|(r, _)| *r != rank).map(|(r, s)| (shift(r), s)).collect();
        self.digests.clear();
        self.donors = std::mem::take(&mut self.donors).into_iter().filter(|(r, _)| *r != rank).map(|(r, w)| (shift(r), w)).collect();
        let lowest = self.donors.keys().next().copied().unwrap_or(0);
        let donor = |from: usize| if from == rank { lowest } else { shift(from) };
        self.resync_next = self.resync_next.iter().filter(|t| t.0 != rank).map(|&(r, from, s)| (shift(r), donor(from), s)).collect();
        self.resync_now = self.resync_now.iter().filter(|t| t.0 != rank).map(|&(r, from)| (shift(r), donor(from))).collect();
    }

    /// The bytes of state sent to each worker respawned from a healthy replica since the last
    /// call (the runner charges them at the network's bandwidth).
    pub fn take_transfers(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.transfers)
    }

    /// Measurement only: steps since the most recent fault at or before `step`.
    fn latency(&self, step: u64) -> Option<u64> {
        self.faults.log.iter().map(|l| l.event.step).filter(|&s| s <= step).max().map(|s| step - s)
    }

    /// Records a detection, asks the strategy and turns the decision into a control value.
    fn fire(&mut self, ctx: &Ctx, kind: Detection, ranks: &[usize]) -> Control {
        let mut unhealthy: Vec<usize> = ranks.to_vec();
        unhealthy.extend(self.down.iter().copied().filter(|r| !ranks.contains(r)));
        // Damage seen again in a redone step counts against rollback, whatever caused it: the
        // guard cannot tell a second transient fault from damage the redo did not remove.
        let situation = Situation { replicas: self.replicas, unhealthy, redos: ctx.attempt };
        let decision = decide(self.strategy, kind, ranks, &situation);
        self.detections.push(DetectionRecord {
            step: ctx.step,
            rank: ranks.first().copied(),
            kind,
            point: Some(ctx.point),
            latency_steps: self.latency(ctx.step),
            decision: decision.clone(),
            buckets: None,
        });
        self.carry_out(decision, ctx.step)
    }

    /// A checkpoint whose stored digests do not match its data was met while restarting at
    /// `step` (worker `rank`'s file): records the detection and returns the strategy's decision
    /// (`Continue`: load it anyway, the published method; otherwise fall back to an older one).
    pub fn checkpoint_mismatch(&mut self, step: u64, rank: usize) -> Decision {
        let situation = Situation { replicas: self.replicas, unhealthy: vec![rank], redos: 0 };
        let decision = decide(self.strategy, Detection::ChecksumMismatch, &[rank], &situation);
        self.detections.push(DetectionRecord {
            step,
            rank: Some(rank),
            kind: Detection::ChecksumMismatch,
            point: None,
            latency_steps: self.latency(step),
            decision: decision.clone(),
            buckets: None,
        });
        decision
    }

    fn carry_out(&mut self, decision: Decision, step: u64) -> Control {
        match decision {
            Decision::Continue => Control::Continue,
            Decision::DropContribution { .. } => Control::Skip,
            Decision::RedoStep { .. } => Control::Redo,
            Decision::Resync { ranks, from, next_step } => {
                for r in ranks {
                    if next_step { self.resync_next.push((r, from, step)) } else { self.resync_now.push((r, from)) }
                }
                Control::Continue
            }
            Decision::Both { steps: all } => {
                let mut out = Control::Continue;
                for d in all {
                    let c = self.carry_out(d, step);
                    if matches!(out, Control::Continue) {
                        out = c;
                    }
                }
                out
            }
            d @ (Decision::RestartFromCheckpoint | Decision::FallBackToOlderCheckpoint | Decision::Fail) => {
                self.pending = Some(d);
                Control::Stop
            }
        }
    }

    /// Copies the donor's model and optimizer state into `w` (its rank, random stream and
    /// cursor stay its own).
    fn resync(&self, w: &mut Worker, from: usize) -> bool {
        let Some(d) = self.donors.get(&from) else { return false };
        w.net = d.net.clone();
        w.optim = d.optim.clone();
        true
    }
}

impl Hooks for Guard {
    fn undo(&self) -> bool {
        self.strategy == Strategy::Rollback
    }

    fn before_step(&mut self, ctx: &Ctx, worker: &mut Worker) -> Control {
        if let Some(i) = self.resync_next.iter().position(|&(r, _, s)| r == ctx.rank && ctx.step > s) {
            let (_, from, _) = self.resync_next.remove(i);
            if self.resync(worker, from) {
                self.faults.respawn(ctx.rank);
                self.down.remove(&ctx.rank);
                self.transfers.push(worker.state_bytes());
            }
        }
        let c = self.faults.before_step(ctx, worker);
        // A worker that does not start its step has stopped (fail-stop): a real job sees it at
        // once, as a timeout on the collective.
        if matches!(c, Control::Skip) && self.down.insert(ctx.rank) {
            return match self.fire(ctx, Detection::Crash, &[ctx.rank]) {
                Control::Continue => c,
                other => other,
            };
        }
        c
    }

    fn rebalance(&self) -> bool {
        self.rebalance
    }

    fn crash_time(&mut self, ctx: &Ctx, timeline: &Timeline) -> Option<f64> {
        self.faults.crash_time(ctx, timeline)
    }

    /// A real job sees a crash when the collective in flight times out: the strategy decides
    /// (rollback redoes the step without the worker, lossy forward finishes it over the
    /// survivors, checkpoint-restart reloads, `none` fails the run).
    fn on_crash(&mut self, ctx: &Ctx, crash: &Crash) -> Control {
        if !self.down.insert(ctx.rank) {
            return Control::Skip;
        }
        let control = self.fire(ctx, Detection::Crash, &[ctx.rank]);
        if let Some(record) = self.detections.last_mut() {
            record.buckets = Some([crash.completed_buckets, crash.buckets]);
        }
        match control {
            Control::Continue => Control::Skip,
            other => other,
        }
    }

    fn after_loss(&mut self, ctx: &Ctx, loss: &mut LossInfo) -> Control {
        let c = self.faults.after_loss(ctx, loss);
        if !matches!(c, Control::Continue) {
            return c;
        }
        let rank: Vec<usize> = if ctx.micro_batch.is_some() { Vec::new() } else { vec![ctx.rank] };
        if self.detect.nan_loss && !(loss.loss.is_finite() && loss.loss.abs() <= self.detect.extreme_threshold) {
            return self.fire(ctx, Detection::NonFiniteLoss, &rank);
        }
        if let Some(s) = &self.detect.loss_spike {
            let spike = self.spikes.entry(ctx.rank).or_insert_with(|| LossSpike::new(s.window, s.factor));
            if spike.observe(loss.loss) {
                return self.fire(ctx, Detection::LossSpike, &rank);
            }
        }
        Control::Continue
    }

    fn after_backward(&mut self, ctx: &Ctx, grads: &mut Grads) -> Control {
        let c = self.faults.after_backward(ctx, grads);
        if !matches!(c, Control::Continue) {
            return c;
        }
        if self.detect.nan_gradients && !all_within(grads.values().cloned(), self.detect.extreme_threshold) {
            return self.fire(ctx, Detection::NonFiniteGradients, &[ctx.rank]);
        }
        Control::Continue
    }

    fn after_allreduce(&mut self, ctx: &Ctx, grads: &mut Grads) -> Control {
        self.faults.after_allreduce(ctx, grads)
    }

    fn after_optimizer_step(&mut self, ctx: &Ctx, worker: &mut Worker) -> Control {
        let c = self.faults.after_optimizer_step(ctx, worker);
        if !matches!(c, Control::Continue) {
            return c;
        }
        if self.detect.nan_weights
            && !(weights_within(&worker.net, self.detect.extreme_threshold)
                && all_within(worker.optim.params.values().flat_map(|p| p.buffers.values().cloned()), self.detect.extreme_threshold))
        {
            let c = self.fire(ctx, Detection::NonFiniteWeights, &[ctx.rank]);
            if !matches!(c, Control::Continue) {
                return c;
            }
        } else if matches!(self.strategy, Strategy::Rollback | Strategy::LossyForward) && !self.down.contains(&ctx.rank) {
            // Only these strategies re-sync replicas; keeping a donor holds its tensors alive.
            self.donors.insert(ctx.rank, worker.clone());
        }
        // Re-syncs waiting for a donor that has now taken its update.
        if let Some(i) = self.resync_now.iter().position(|(r, _)| *r == ctx.rank)
            && self.donors.contains_key(&self.resync_now[i].1)
        {
            let (_, from) = self.resync_now.remove(i);
            self.resync(worker, from);
        }
        if let Some(k) = self.detect.divergence_every
            && self.replicas > 1
            && ctx.step.is_multiple_of(k)
        {
            self.digests.insert(ctx.rank, digest(&worker.net));
            if ctx.rank + 1 == ctx.world {
                let all: Vec<(usize, u64)> = std::mem::take(&mut self.digests).into_iter().collect();
                let majority = all.iter().map(|(_, d)| *d).max_by_key(|d| all.iter().filter(|(_, x)| x == d).count());
                let odd: Vec<usize> = all.iter().filter(|(_, d)| Some(*d) != majority).map(|(r, _)| *r).collect();
                if !odd.is_empty() {
                    // The replicas before this one have finished the step: re-sync them before
                    // their next forward pass.
                    let c = self.fire(ctx, Detection::ReplicaDivergence, &odd);
                    let now = std::mem::take(&mut self.resync_now);
                    for (r, from) in now {
                        if r == ctx.rank {
                            self.resync(worker, from);
                        } else {
                            self.resync_next.push((r, from, ctx.step));
                        }
                    }
                    return c;
                }
            }
        }
        Control::Continue
    }

    fn on_message(&mut self, ctx: &Ctx, msg: &mut Message) -> Control {
        self.faults.on_message(ctx, msg)
    }

    fn watch_forward(&self, ctx: &Ctx) -> bool {
        self.faults.watch_forward(ctx)
    }

    // A corrupted neuron shows up in the loss (and gradients): the detectors there see it.
    fn on_activation(&mut self, ctx: &Ctx, act: &mut Activation) -> Control {
        self.faults.on_activation(ctx, act)
    }
}
