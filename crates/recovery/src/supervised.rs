//! A guard at work on a run with faults: the training hooks that apply the scheduled faults
//! (the [`FaultInjector`]'s) and, around them, the guard's detectors and decisions.
//!
//! The guard reads what the simulated system shows (a worker that does not start its step,
//! losses, gradients, weights, digests); the injector's log is read for measurement only, each
//! detection's latency (`FaultInjector::withhold_log` empties it and the decisions stay the
//! same: `crates/recovery/tests/guard.rs`).

use resilab_faults::FaultInjector;
use resilab_train::{Activation, Control, Crash, Ctx, Grads, Hooks, LossInfo, Message, Timeline, Worker};

use crate::detect::{LossSpike, all_within, digest, gradients_within, weights_within};
use crate::guard::Guard;
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

    /// Records a detection with its latency, asks the strategy and turns the decision into a
    /// control value.
    fn fire(&mut self, ctx: &Ctx, kind: Detection, ranks: &[usize]) -> Control {
        let latency = self.latency(ctx.step);
        self.guard.fire(ctx, kind, ranks, latency)
    }
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
        let rank: Vec<usize> = if ctx.micro_batch.is_some() { Vec::new() } else { vec![ctx.rank] };
        if self.guard.detect.nan_loss && !(loss.loss.is_finite() && loss.loss.abs() <= self.guard.detect.extreme_threshold) {
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
        if self.guard.detect.nan_gradients && !gradients_within(grads, ctx.loss_scale, self.guard.detect.extreme_threshold) {
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
        if self.guard.detect.nan_weights
            && !(weights_within(&worker.net, self.guard.detect.extreme_threshold)
                && all_within(worker.optim.params.values().flat_map(|p| p.buffers.values().cloned()), self.guard.detect.extreme_threshold))
        {
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
        if let Some(k) = self.guard.detect.divergence_every
            && self.guard.replicas > 1
            && ctx.step.is_multiple_of(k)
        {
            self.guard.digests.insert(ctx.rank, digest(&worker.net));
            if ctx.rank + 1 == ctx.world {
                let all: Vec<(usize, u64)> = std::mem::take(&mut self.guard.digests).into_iter().collect();
                let majority = all.iter().map(|(_, d)| *d).max_by_key(|d| all.iter().filter(|(_, x)| x == d).count());
                let odd: Vec<usize> = all.iter().filter(|(_, d)| Some(*d) != majority).map(|(r, _)| *r).collect();
                if !odd.is_empty() {
                    // The replicas before this one have finished the step: re-sync them before
                    // their next forward pass.
                    let c = self.fire(ctx, Detection::ReplicaDivergence, &odd);
                    let now = std::mem::take(&mut self.guard.resync_now);
                    for (r, from) in now {
                        if r == ctx.rank {
                            self.guard.resync(worker, from);
                        } else {
                            self.guard.resync_next.push((r, from, ctx.step));
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
