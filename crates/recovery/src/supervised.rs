//! A guard at work on a run with faults: the training hooks that apply the scheduled faults
//! (the [`FaultInjector`]'s) and, around them, the guard's detectors and decisions.
//!
//! The guard reads what the simulated system shows (a worker that does not start its step,
//! losses, gradients, weights, digests); the injector's log is read for measurement only, each
//! detection's latency (`FaultInjector::withhold_log` empties it and the decisions stay the
//! same: `crates/recovery/tests/guard.rs`).

use resilab_faults::FaultInjector;
use resilab_train::{Activation, Control, Crash, Ctx, Grads, Hooks, LossInfo, Message, Timeline, Worker};

use crate::detect::{LossSpike, digest, gradients_alarm, loss_alarm, sum_and_max, values_alarm, weights_reduced};
use crate::guard::Guard;
use crate::signals::{SignalKind, SignalLog};
use crate::{Decision, Detection, Strategy};

/// A [`Guard`] and the run's [`FaultInjector`] as one set of training hooks.
pub struct Supervised<'a> {
    guard: &'a mut Guard,
    faults: &'a mut FaultInjector,
}

impl Guard {
    /// This guard watching a run whose faults `faults` applies: pass the result to
    /// `Trainer::step_with`.
    pub fn supervise<'a>(&'a mut self, faults: &'a mut FaultInjector) -> Supervised<'a> {
        Supervised { guard: self, faults }
    }
}

impl Supervised<'_> {
    /// Brings every crashed worker back (the runner restored the state of all workers).
    pub fn respawn_all(&mut self) {
        for r in std::mem::take(&mut self.guard.down) {
            self.faults.respawn(r);
        }
        self.guard.resync_next.clear();
    }

    /// The job went on without worker `rank` for good (the runner removed it from the
    /// trainer): the injector drops its faults, and every rank above it moves down one in the
    /// guard's records and the injector's, as the workers did. Re-syncs waiting for it are
    /// dropped; those that would copy from it copy from the lowest replica left instead.
    pub fn remove_rank(&mut self, rank: usize) {
        self.faults.remove_rank(rank);
        self.guard.remove_rank(rank);
        self.guard.record_removed(rank);
    }

    /// A checkpoint whose stored digests do not match its data was met while restarting at
    /// `step` (worker `rank`'s file): records the detection and returns the strategy's decision
    /// (`Continue`: load it anyway, the published method; otherwise fall back to an older one).
    pub fn checkpoint_mismatch(&mut self, step: u64, rank: usize) -> Decision {
        let latency = self.latency(step);
        self.guard.checkpoint_mismatch(step, rank, latency)
    }

    /// Measurement only: steps since the most recent fault at or before `step`.
    fn latency(&self, step: u64) -> Option<u64> {
        self.faults.log.iter().map(|l| l.event.step).filter(|&s| s <= step).max().map(|s| step - s)
    }

    /// `reduce()`, timed into the signal costs while recording.
    fn reduce<T>(&mut self, kind: SignalKind, reduce: impl FnOnce() -> T) -> T {
        let start = std::time::Instant::now();
        let out = reduce();
        if let Some(log) = &mut self.guard.signals {
            log.costs.add(kind, start.elapsed());
        }
        out
    }

    /// Whether the weights-and-optimizer check fires on `worker` after its update (never while
    /// `detect.nan_weights` is off); records both reductions while recording.
    fn state_alarm(&mut self, ctx: &Ctx, worker: &Worker) -> bool {
        if !(self.guard.detect.nan_weights || self.guard.signals.is_some()) {
            return false;
        }
        let weights = self.reduce(SignalKind::Weights, || weights_reduced(&worker.net));
        let optim =
            self.reduce(SignalKind::Optimizer, || sum_and_max(worker.optim.params.values().flat_map(|p| p.buffers.values().cloned())));
        self.guard.record_reduced(ctx, SignalKind::Weights, weights);
        self.guard.record_reduced(ctx, SignalKind::Optimizer, optim);
        let t = self.guard.detect.extreme_threshold;
        self.guard.detect.nan_weights && (values_alarm(weights, t) || values_alarm(optim, t))
    }

    /// The replica-divergence check after worker `ctx.rank`'s update: at every
    /// `detect.divergence_every`-th step (and, while recording, at every step) each replica's
    /// digest is taken; the last replica compares them, records the agreement and, at a checked
    /// step, fires on the replicas that disagree with the majority.
    fn compare_digests(&mut self, ctx: &Ctx, worker: &mut Worker) -> Control {
        let checked = self.guard.detect.divergence_every.is_some_and(|k| ctx.step.is_multiple_of(k));
        if self.guard.replicas < 2 || !(checked || self.guard.signals.is_some()) {
            return Control::Continue;
        }
        let d = self.reduce(SignalKind::Digests, || digest(&worker.net));
        if checked {
            self.guard.digests.insert(ctx.rank, d);
        }
        if let Some(log) = &mut self.guard.signals {
            log.digest(ctx.step, ctx.attempt, ctx.rank, d);
        }
        if ctx.rank + 1 != ctx.world {
            return Control::Continue;
        }
        let recorded = self.guard.signals.as_mut().map(SignalLog::take_digests).unwrap_or_default();
        let all = if checked { std::mem::take(&mut self.guard.digests) } else { recorded };
        let odd = disagreeing(&all);
        self.guard.record_digests(ctx, &odd);
        if !checked || odd.is_empty() {
            return Control::Continue;
        }
        // The replicas before this one have finished the step: re-sync them before their next
        // forward pass.
        let c = self.fire(ctx, Detection::ReplicaDivergence, &odd);
        for (r, from) in std::mem::take(&mut self.guard.resync_now) {
            if r == ctx.rank {
                self.guard.resync(worker, from);
            } else {
                self.guard.resync_next.push((r, from, ctx.step));
            }
        }
        c
    }

    /// Records a detection with its latency, asks the strategy and turns the decision into a
    /// control value.
    fn fire(&mut self, ctx: &Ctx, kind: Detection, ranks: &[usize]) -> Control {
        let latency = self.latency(ctx.step);
        self.guard.fire(ctx, kind, ranks, latency)
    }
}

/// The ranks whose digest differs from the most common one (of digests as common as it, the one
/// the highest rank holds: `max_by_key` keeps the last maximum).
fn disagreeing(digests: &std::collections::BTreeMap<usize, u64>) -> Vec<usize> {
    let majority = digests.values().max_by_key(|d| digests.values().filter(|x| x == d).count());
    digests.iter().filter(|(_, d)| Some(*d) != majority).map(|(r, _)| *r).collect()
}

impl Hooks for Supervised<'_> {
    fn undo(&self) -> bool {
        self.guard.strategy == Strategy::Rollback
    }

    fn before_step(&mut self, ctx: &Ctx, worker: &mut Worker) -> Control {
        if let Some(i) = self.guard.resync_next.iter().position(|&(r, _, s)| r == ctx.rank && ctx.step > s) {
            let (_, from, _) = self.guard.resync_next.remove(i);
            if self.guard.resync(worker, from) {
                self.faults.respawn(ctx.rank);
                // A crashed worker back in the job; a diverged replica re-synced never left it.
                if self.guard.down.remove(&ctx.rank) {
                    self.guard.joins += 1;
                }
                self.guard.transfers.push(worker.state_bytes());
            }
        }
        let c = self.faults.before_step(ctx, worker);
        // A worker that does not start its step has stopped (fail-stop): a real job sees it at
        // once, as a timeout on the collective.
        if matches!(c, Control::Skip) && self.guard.down.insert(ctx.rank) {
            return match self.fire(ctx, Detection::Crash, &[ctx.rank]) {
                Control::Continue => c,
                other => other,
            };
        }
        c
    }

    fn rebalance(&self) -> bool {
        self.guard.rebalance
    }

    fn crash_time(&mut self, ctx: &Ctx, timeline: &Timeline) -> Option<f64> {
        self.faults.crash_time(ctx, timeline)
    }

    /// A real job sees a crash when the collective in flight times out: the strategy decides
    /// (rollback redoes the step without the worker, lossy forward finishes it over the
    /// survivors, checkpoint-restart reloads, `none` fails the run).
    fn on_crash(&mut self, ctx: &Ctx, crash: &Crash) -> Control {
        if !self.guard.down.insert(ctx.rank) {
            return Control::Skip;
        }
        let control = self.fire(ctx, Detection::Crash, &[ctx.rank]);
        if let Some(record) = self.guard.detections.last_mut() {
            record.buckets = Some([crash.completed_buckets, crash.buckets]);
            record.crash_fraction = Some(if crash.step_s > 0.0 { crash.at_s / crash.step_s } else { 0.0 });
            record.crash_phase = Some(crash.phase.name());
        }
        match control {
            Control::Continue => Control::Skip,
            other => other,
        }
    }

    fn after_pass(&mut self, ctx: &Ctx, worker: &mut Worker) {
        self.faults.after_pass(ctx, worker);
    }

    fn after_loss(&mut self, ctx: &Ctx, loss: &mut LossInfo) -> Control {
        let c = self.faults.after_loss(ctx, loss);
        if !matches!(c, Control::Continue) {
            return c;
        }
        self.guard.record(ctx, SignalKind::Loss, loss.loss, None);
        let rank: Vec<usize> = if ctx.micro_batch.is_some() { Vec::new() } else { vec![ctx.rank] };
        if self.guard.detect.nan_loss && loss_alarm(loss.loss, self.guard.detect.extreme_threshold) {
            return self.fire(ctx, Detection::NonFiniteLoss, &rank);
        }
        if let Some(s) = &self.guard.detect.loss_spike {
            let spike = self.guard.spikes.entry(ctx.rank).or_insert_with(|| LossSpike::new(s.window, s.factor));
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
        if !(self.guard.detect.nan_gradients || self.guard.signals.is_some()) {
            return Control::Continue;
        }
        let reduced = self.reduce(SignalKind::Gradients, || sum_and_max(grads.values().cloned()));
        self.guard.record_reduced(ctx, SignalKind::Gradients, reduced);
        if self.guard.detect.nan_gradients && gradients_alarm(reduced, ctx.loss_scale, self.guard.detect.extreme_threshold) {
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
        if self.state_alarm(ctx, worker) {
            let c = self.fire(ctx, Detection::NonFiniteWeights, &[ctx.rank]);
            if !matches!(c, Control::Continue) {
                return c;
            }
        } else if matches!(self.guard.strategy, Strategy::Rollback | Strategy::LossyForward) && !self.guard.down.contains(&ctx.rank) {
            // Only these strategies re-sync replicas; keeping a donor holds its tensors alive.
            self.guard.donors.insert(ctx.rank, worker.clone());
        }
        // Re-syncs waiting for a donor that has now taken its update.
        if let Some(i) = self.guard.resync_now.iter().position(|(r, _)| *r == ctx.rank)
            && self.guard.donors.contains_key(&self.guard.resync_now[i].1)
        {
            let (_, from) = self.guard.resync_now.remove(i);
            self.guard.resync(worker, from);
        }
        self.compare_digests(ctx, worker)
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
