//! The fault injector: a [`Hooks`] implementation that applies scheduled faults.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use burn::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use resilab_inject::{Dtype, Plan, Record, Spec, inject_f32_as};
use resilab_models::{DatasetPath, Precision, for_each_param, map_params, stream_seed};
use resilab_train::{Activation, Control, Ctx, Grads, Hooks, Message, MessageKind, Point, Timeline, Worker};
use serde::Serialize;

use crate::schedule::neuron_path;
use crate::{CrashAt, FaultEntry, FaultEvent, FaultTarget};

/// What one fault did: a line of the run's fault log.
#[derive(Clone, Debug, Serialize)]
pub struct FaultLog {
    /// The event.
    pub event: FaultEvent,
    /// Attempt of the step it struck (0 unless the step was redone).
    pub attempt: u32,
    /// Micro-batch, for pipeline messages.
    pub micro_batch: Option<usize>,
    /// Values corrupted.
    pub corrupted: usize,
    /// Corrupted values that became NaN.
    pub nan: usize,
    /// Corrupted values that became ±Inf.
    pub inf: usize,
    /// Corrupted values that became finite but extreme.
    pub extreme: usize,
    /// A crash: simulated seconds from its step's start at which it struck, on the timeline it
    /// was placed on (the cost model's; see `Hooks::crash_time`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_at_s: Option<f64>,
    /// A crash whose worker's node is gone for good (`permanent = true`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub permanent: bool,
    /// Every attempt, as `resilab inject` logs them; tensor names are checkpoint paths
    /// (`model/layer1/0/conv1/weight`, `optimizer/.../momentum_buffer`, `gradients/...`,
    /// `activations/stage1`, `message_gradients/stage0`, `neurons/layer2/1` with the flat index
    /// into the block's `[batch, C, H, W]` output).
    pub records: Vec<Record>,
}

impl FaultLog {
    /// The log line of `event`, with its attempts' records and the counts drawn from them.
    pub fn new(event: FaultEvent, attempt: u32, micro_batch: Option<usize>, records: Vec<Record>) -> Self {
        let corrupted: Vec<&Record> = records.iter().filter(|r| r.outcome == resilab_inject::Outcome::Corrupted).collect();
        Self {
            event,
            attempt,
            micro_batch,
            corrupted: corrupted.len(),
            nan: corrupted.iter().filter(|r| r.nan).count(),
            inf: corrupted.iter().filter(|r| r.inf).count(),
            extreme: corrupted.iter().filter(|r| r.extreme).count(),
            crash_at_s: None,
            permanent: false,
            records,
        }
    }
}

/// Applies a fault schedule through the training hooks. Faults are transient: each event
/// strikes once, so a step that is redone (rollback) or recomputed (after a restart) runs
/// without it. A crash strikes at a time inside its step ([`Hooks::crash_time`]: the entry's
/// `at_fraction` or `phase`, or uniformly over the step's simulated duration); the crashed
/// worker then stays out of every step, from its start, until [`FaultInjector::respawn`].
#[derive(Clone, Debug)]
pub struct FaultInjector {
    entries: Vec<FaultEntry>,
    events: Vec<FaultEvent>,
    fault_seed: u64,
    crashed: BTreeSet<usize>,
    /// Crashed workers whose node is gone for good: no respawn brings them back on it.
    lost: BTreeSet<usize>,
    /// Crashes due in the current step, struck when the step's timeline is known.
    pending_crashes: Vec<FaultEvent>,
    fired: BTreeSet<usize>,
    /// Stuck-at values: `(rank, last step held, parameter name, flat index, value)`.
    stuck: Vec<(usize, u64, String, usize, f32)>,
    /// Neuron faults drawn for the coming forward pass: `(event, rank, block name)`.
    neurons: Vec<(FaultEvent, usize, String)>,
    /// Master weights a weight-copy fault replaced for the step's passes, put back after them:
    /// `(rank, parameter name, flat index, master value)`.
    masters: Vec<(usize, String, usize, f32)>,
    /// Everything injected so far, in order: for measurement (counts, detection latency) and
    /// the run's `faults.jsonl`. No recovery decision reads it.
    pub log: Vec<FaultLog>,
    /// Where entries go instead of `log` once [`FaultInjector::withhold_log`] was called.
    withheld: Option<Vec<FaultLog>>,
}

/// The type the values `target` hits hold in a run computing in `precision`: the half
/// format's for half values in a bf16 or fp16 run, float32 otherwise.
fn format_of(target: FaultTarget, precision: Precision) -> Dtype {
    match precision {
        Precision::Bf16 if target.half_valued() => Dtype::Bf16,
        Precision::Fp16 if target.half_valued() => Dtype::F16,
        _ => Dtype::F32,
    }
}

fn host(t: Tensor<1>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_into_vec::<f32>().unwrap_or_default()
}

impl FaultInjector {
    /// An injector for `events` (from [`crate::schedule`]) of `entries`.
    pub fn new(entries: Vec<FaultEntry>, events: Vec<FaultEvent>, fault_seed: u64) -> Self {
        Self {
            entries,
            events,
            fault_seed,
            crashed: BTreeSet::new(),
            lost: BTreeSet::new(),
            pending_crashes: Vec::new(),
            fired: BTreeSet::new(),
            stuck: Vec::new(),
            neurons: Vec::new(),
            masters: Vec::new(),
            log: Vec::new(),
            withheld: None,
        }
    }

    /// Workers currently crashed: the simulated system's state, for the runner to bring them
    /// back. A guard learns of a crash from [`Hooks::before_step`] returning [`Control::Skip`].
    pub fn crashed(&self) -> &BTreeSet<usize> {
        &self.crashed
    }

    /// From now on, entries go to a private record instead of [`FaultInjector::log`], which
    /// stays empty: whoever holds the injector can no longer see what was injected. Tests use it
    /// to show that recovery decisions do not depend on the log.
    pub fn withhold_log(&mut self) {
        self.withheld.get_or_insert_with(Vec::new);
    }

    /// Every entry so far, withheld or not.
    pub fn logged(&self) -> &[FaultLog] {
        self.withheld.as_deref().unwrap_or(&self.log)
    }

    fn push_log(&mut self, entry: FaultLog) {
        match &mut self.withheld {
            Some(w) => w.push(entry),
            None => self.log.push(entry),
        }
    }

    /// Crashed workers whose node is gone for good (a permanent crash), in the simulated
    /// system's state: recovery cannot respawn them where they were; a spare can take their
    /// place ([`FaultInjector::replace`]) or the job goes on without them
    /// ([`FaultInjector::remove_rank`]).
    pub fn lost(&self) -> &BTreeSet<usize> {
        &self.lost
    }

    /// Brings a crashed worker back (recovery has restored its state). A worker whose node is
    /// gone stays down.
    pub fn respawn(&mut self, rank: usize) {
        if !self.lost.contains(&rank) {
            self.crashed.remove(&rank);
        }
    }

    /// A spare node takes the place of lost worker `rank`: the rank can be brought back (its
    /// state comes from recovery: a replica's copy, or a checkpoint).
    pub fn replace(&mut self, rank: usize) {
        self.lost.remove(&rank);
    }

    /// The job went on without worker `rank` for good (a shrunk communicator): its pending
    /// faults are dropped and every rank above it moves down one, as the workers do.
    pub fn remove_rank(&mut self, rank: usize) {
        let shift = |r: usize| if r > rank { r - 1 } else { r };
        self.events.retain(|e| e.rank != rank || self.fired.contains(&e.id));
        for e in self.events.iter_mut().filter(|e| !self.fired.contains(&e.id)) {
            e.rank = shift(e.rank);
        }
        self.pending_crashes.retain(|e| e.rank != rank);
        for e in &mut self.pending_crashes {
            e.rank = shift(e.rank);
        }
        for set in [&mut self.crashed, &mut self.lost] {
            *set = set.iter().filter(|&&r| r != rank).map(|&r| shift(r)).collect();
        }
        self.stuck.retain(|s| s.0 != rank);
        for s in &mut self.stuck {
            s.0 = shift(s.0);
        }
        self.neurons.retain(|n| n.1 != rank);
        for n in &mut self.neurons {
            n.1 = shift(n.1);
        }
        self.masters.retain(|m| m.0 != rank);
        for m in &mut self.masters {
            m.0 = shift(m.0);
        }
    }

    /// Events of `target` due at `ctx`'s step on `ctx`'s worker that have not struck yet; they
    /// are marked as struck. A step redone, or recomputed after a restart, runs without them.
    fn due(&mut self, ctx: &Ctx, targets: &[FaultTarget]) -> Vec<FaultEvent> {
        let due: Vec<FaultEvent> = self
            .events
            .iter()
            .filter(|e| e.step == ctx.step && e.rank == ctx.rank && targets.contains(&e.target) && !self.fired.contains(&e.id))
            .copied()
            .collect();
        self.fired.extend(due.iter().map(|e| e.id));
        due
    }

    /// The checkpoint faults of the schedule (the runner alters the files).
    pub fn checkpoint_events(&self) -> Vec<FaultEvent> {
        self.events.iter().filter(|e| e.target == FaultTarget::Checkpoint).copied().collect()
    }

    /// The earliest step any scheduled event strikes in (checkpoint faults included: they strike
    /// after that step's checkpoint); `None` for an empty schedule. Before it, a run meets no
    /// fault at all.
    pub fn first_step(&self) -> Option<u64> {
        self.events.iter().map(|e| e.step).min()
    }

    /// Whether, after `step`, nothing the injector holds can change a run any more: every
    /// scheduled event has struck, no worker is down, no crash waits for its step's timeline,
    /// no stuck-at value holds past `step` and no neuron fault waits for a forward pass.
    pub fn quiescent(&self, step: u64) -> bool {
        self.events.iter().all(|e| self.fired.contains(&e.id))
            && self.crashed.is_empty()
            && self.lost.is_empty()
            && self.pending_crashes.is_empty()
            && self.stuck.iter().all(|s| s.1 <= step)
            && self.neurons.is_empty()
            && self.masters.is_empty()
    }

    /// Checkpoint faults due after `step` that have not struck; they are marked as struck.
    pub fn due_checkpoint(&mut self, step: u64) -> Vec<FaultEvent> {
        let due: Vec<FaultEvent> = self
            .events
            .iter()
            .filter(|e| e.target == FaultTarget::Checkpoint && e.step == step && !self.fired.contains(&e.id))
            .copied()
            .collect();
        self.fired.extend(due.iter().map(|e| e.id));
        due
    }

    /// The seed of an event's bit draws.
    fn event_seed(&self, event: &FaultEvent) -> u64 {
        stream_seed(self.fault_seed, &format!("fault.event.{}", event.id))
    }

    /// Applies checkpoint fault `event` to `file`, the newest checkpoint's file of its worker,
    /// in place (the injector's fault model, `resilab inject`'s keys), and logs what it
    /// changed. The runner chooses the file and restarts from it, as the published method does.
    pub fn strike_checkpoint(&mut self, event: FaultEvent, file: &Path) -> std::result::Result<(), resilab_inject::Error> {
        let Some(spec) = self.spec(&event).cloned() else { return Ok(()) };
        let seed = self.event_seed(&event);
        let report = resilab_inject::inject_file(&spec, file, &resilab_inject::Output::InPlace, seed)?;
        self.push_log(FaultLog::new(event, 0, None, report.records));
        Ok(())
    }

    /// The injector settings of an event's entry.
    fn spec(&self, event: &FaultEvent) -> Option<&Spec> {
        self.entries.iter().find(|e| e.index == event.entry).map(|e| &e.spec)
    }

    /// Corrupts the tensors, named by `K` (a [`DatasetPath`], or a block's output's name) as
    /// `event`'s entry says; returns the changed tensors under their keys.
    fn corrupt<K: std::fmt::Display>(&mut self, event: FaultEvent, ctx: &Ctx, tensors: Vec<(K, Tensor<1>)>) -> Vec<(K, Tensor<1>)> {
        let Some(spec) = self.spec(&event).cloned() else { return Vec::new() };
        let (keys, candidates): (Vec<K>, Vec<(String, Tensor<1>)>) = tensors
            .into_iter()
            .map(|(k, t)| {
                let name = k.to_string();
                (k, (name, t))
            })
            .filter(|(_, (n, _))| {
                spec.locations.as_ref().is_none_or(|locs| locs.iter().any(|l| resilab_inject::config::location_matches(l, n)))
            })
            .unzip();
        let total: u64 = candidates.iter().map(|(_, t)| t.dims()[0] as u64).sum();
        let plan = Plan {
            model: spec.model.clone(),
            probability: spec.probability,
            attempts: spec.tries.attempts(total),
            sampling: spec.sampling,
        };
        let device: Vec<Device> = candidates.iter().map(|(_, t)| t.device()).collect();
        let mut values: Vec<(String, Vec<f32>)> = candidates.into_iter().map(|(n, t)| (n, host(t))).collect();
        let records = {
            let mut slots: Vec<(&str, &mut [f32])> = values.iter_mut().map(|(n, v)| (n.as_str(), v.as_mut_slice())).collect();
            inject_f32_as(&plan, &mut slots, self.event_seed(&event), format_of(event.target, ctx.precision))
        };
        let hit: BTreeSet<&str> =
            records.iter().filter(|r| r.outcome == resilab_inject::Outcome::Corrupted).map(|r| r.dataset.as_str()).collect();
        let changed = keys
            .into_iter()
            .zip(&values)
            .zip(&device)
            .filter(|((_, (n, _)), _)| hit.contains(n.as_str()))
            .map(|((k, (_, v)), d)| (k, Tensor::from_data(TensorData::new(v.clone(), [v.len()]), d)))
            .collect();
        self.push_log(FaultLog::new(event, ctx.attempt, ctx.micro_batch, records));
        changed
    }

    fn corrupt_grads(&mut self, ctx: &Ctx, grads: &mut Grads, target: FaultTarget) {
        for event in self.due(ctx, &[target]) {
            let tensors = grads.iter().map(|(n, t)| (DatasetPath::Gradient(n.clone()), t.clone())).collect();
            for (path, t) in self.corrupt(event, ctx, tensors) {
                grads.insert(path.param().to_string(), t);
            }
        }
    }
}

impl FaultInjector {
    /// A weights fault: corrupts the worker's parameters; a stuck-at fault's corrupted values
    /// are then held for its steps.
    fn corrupt_weights(&mut self, event: FaultEvent, ctx: &Ctx, worker: &mut Worker) {
        let mut tensors = Vec::new();
        for_each_param(&worker.net, |info, t| tensors.push((DatasetPath::Model(info.name.clone()), t.without_autodiff())));
        // By parameter name.
        let changed: BTreeMap<String, Tensor<1>> =
            self.corrupt(event, ctx, tensors).into_iter().map(|(p, t)| (p.param().to_string(), t)).collect();
        if !changed.is_empty() {
            let net = worker.net.clone();
            worker.net = map_params(net, |info, _| changed.get(&info.name).cloned());
        }
        let hold = self.entries.iter().find(|e| e.index == event.entry).and_then(|e| e.stuck_steps);
        let (Some(k), Some(log)) = (hold, self.logged().last().cloned()) else { return };
        for r in log.records.iter().filter(|r| r.outcome == resilab_inject::Outcome::Corrupted) {
            let Ok(DatasetPath::Model(name)) = r.dataset.parse() else { continue };
            if let Some(t) = changed.get(&name) {
                let v = host(t.clone())[r.index];
                self.stuck.retain(|s| !(s.0 == ctx.rank && s.2 == name && s.3 == r.index));
                self.stuck.push((ctx.rank, ctx.step + k - 1, name, r.index, v));
            }
        }
    }

    /// Stuck-at faults: the corrupted values they hold are written back for their steps.
    fn hold_stuck(&mut self, ctx: &Ctx, worker: &mut Worker) {
        self.stuck.retain(|s| s.1 >= ctx.step);
        let held: Vec<(&str, usize, f32)> =
            self.stuck.iter().filter(|s| s.0 == ctx.rank && s.1 >= ctx.step).map(|s| (s.2.as_str(), s.3, s.4)).collect();
        set_values(worker, &held);
    }

    /// A weight-copy fault: flips in the half values of the convolution and linear weights and
    /// biases the step's passes compute with. The master elements hit are replaced by their
    /// corrupted half values for the passes and put back after them ([`Hooks::after_pass`]),
    /// so that the fault reaches the step's gradients only.
    fn corrupt_weight_copy(&mut self, event: FaultEvent, ctx: &Ctx, worker: &mut Worker) {
        let mut tensors = Vec::new();
        for_each_param(&worker.net, |info, t| {
            if info.has_weight_copy() {
                tensors.push((DatasetPath::Model(info.name.clone()), t.without_autodiff()));
            }
        });
        let masters: BTreeMap<String, Tensor<1>> = tensors.iter().map(|(p, t)| (p.param().to_string(), t.clone())).collect();
        let changed: BTreeMap<String, Tensor<1>> =
            self.corrupt(event, ctx, tensors).into_iter().map(|(p, t)| (p.param().to_string(), t)).collect();
        let Some(log) = self.logged().last().cloned() else { return };
        let mut read: BTreeMap<String, Vec<f32>> = BTreeMap::new();
        for r in log.records.iter().filter(|r| r.outcome == resilab_inject::Outcome::Corrupted) {
            let Ok(DatasetPath::Model(name)) = r.dataset.parse() else { continue };
            let Some(t) = masters.get(&name) else { continue };
            let v = read.entry(name.clone()).or_insert_with(|| host(t.clone()))[r.index];
            // Two attempts on one element: the master is the value before the first.
            if !self.masters.iter().any(|m| m.0 == ctx.rank && m.1 == name && m.2 == r.index) {
                self.masters.push((ctx.rank, name, r.index, v));
            }
        }
        if !changed.is_empty() {
            let net = worker.net.clone();
            worker.net = map_params(net, |info, _| changed.get(&info.name).cloned());
        }
    }

    /// A neuron fault: draws the block whose output it alters in this step's forward pass
    /// (among the blocks its locations name that this worker holds).
    fn draw_neuron_block(&mut self, event: FaultEvent, ctx: &Ctx, worker: &Worker) {
        let locs = self.spec(&event).and_then(|s| s.locations.clone());
        let blocks: Vec<&String> = worker
            .net
            .block_names
            .iter()
            .filter(|b| locs.as_ref().is_none_or(|l| l.iter().any(|l| resilab_inject::config::location_matches(l, &neuron_path(b)))))
            .collect();
        if blocks.is_empty() {
            // A pipeline stage without the named blocks: logged with no flips.
            self.push_log(FaultLog::new(event, ctx.attempt, None, Vec::new()));
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(stream_seed(self.event_seed(&event), "block"));
        let block = blocks[rng.random_range(0..blocks.len())].clone();
        self.neurons.push((event, ctx.rank, block));
    }

    /// An optimizer fault: corrupts the worker's optimizer buffers.
    fn corrupt_optimizer(&mut self, event: FaultEvent, ctx: &Ctx, worker: &mut Worker) {
        let mut tensors = Vec::new();
        for (name, st) in &worker.optim.params {
            for (b, t) in &st.buffers {
                tensors.push((DatasetPath::Optimizer { param: name.clone(), buffer: b.clone() }, t.clone()));
            }
        }
        for (path, t) in self.corrupt(event, ctx, tensors) {
            if let DatasetPath::Optimizer { param, buffer } = path
                && let Some(st) = worker.optim.params.get_mut(&param)
            {
                st.buffers.insert(buffer, t);
            }
        }
    }
}

/// Writes `values` (`(parameter name, flat index, value)`) into the worker's parameters.
fn set_values(worker: &mut Worker, values: &[(&str, usize, f32)]) {
    if values.is_empty() {
        return;
    }
    let net = worker.net.clone();
    worker.net = map_params(net, |info, t| {
        let mine: Vec<_> = values.iter().filter(|s| s.0 == info.name).collect();
        if mine.is_empty() {
            return None;
        }
        let device = t.device();
        let mut v = host(t.without_autodiff());
        for s in mine {
            v[s.1] = s.2;
        }
        let n = v.len();
        Some(Tensor::from_data(TensorData::new(v, [n]), &device))
    });
}

impl Hooks for FaultInjector {
    fn before_step(&mut self, ctx: &Ctx, worker: &mut Worker) -> Control {
        // A crash strikes inside the step, at a time of its timeline ([`Hooks::crash_time`]).
        self.pending_crashes.retain(|e| e.step == ctx.step);
        for event in self.due(ctx, &[FaultTarget::Crash]) {
            if !self.crashed.contains(&ctx.rank) {
                self.pending_crashes.push(event);
            }
        }
        if self.crashed.contains(&ctx.rank) {
            return Control::Skip;
        }
        for event in self.due(ctx, &[FaultTarget::Weights]) {
            self.corrupt_weights(event, ctx, worker);
        }
        self.hold_stuck(ctx, worker);
        // Master values a step that ended early never put back: that step was undone.
        self.masters.retain(|m| m.0 != ctx.rank);
        for event in self.due(ctx, &[FaultTarget::WeightCopy]) {
            self.corrupt_weight_copy(event, ctx, worker);
        }
        // Neuron faults: draw the block now; its output is altered in this step's forward.
        self.neurons.retain(|n| n.1 != ctx.rank);
        for event in self.due(ctx, &[FaultTarget::Neurons]) {
            self.draw_neuron_block(event, ctx, worker);
        }
        for event in self.due(ctx, &[FaultTarget::Optimizer]) {
            self.corrupt_optimizer(event, ctx, worker);
        }
        Control::Continue
    }

    /// Puts back the master weights a weight-copy fault replaced for the passes.
    fn after_pass(&mut self, ctx: &Ctx, worker: &mut Worker) {
        let mine: Vec<(String, usize, f32)> = self.masters.iter().filter(|m| m.0 == ctx.rank).map(|m| (m.1.clone(), m.2, m.3)).collect();
        self.masters.retain(|m| m.0 != ctx.rank);
        let values: Vec<(&str, usize, f32)> = mine.iter().map(|m| (m.0.as_str(), m.1, m.2)).collect();
        set_values(worker, &values);
    }

    fn crash_time(&mut self, ctx: &Ctx, timeline: &Timeline) -> Option<f64> {
        let i = self.pending_crashes.iter().position(|e| e.rank == ctx.rank && e.step == ctx.step)?;
        let event = self.pending_crashes.remove(i);
        self.crashed.insert(ctx.rank);
        let entry = self.entries.iter().find(|e| e.index == event.entry);
        let (at, permanent) = (entry.and_then(|e| e.crash_at), entry.is_some_and(|e| e.permanent));
        if permanent {
            self.lost.insert(ctx.rank);
        }
        let t = match at {
            Some(CrashAt::Fraction(f)) => f * timeline.end_s,
            Some(CrashAt::Phase(p)) => timeline.phase_mid(ctx.rank, p),
            None => {
                let mut rng = ChaCha8Rng::seed_from_u64(stream_seed(self.event_seed(&event), "crash.time"));
                rng.random::<f64>() * timeline.end_s
            }
        };
        self.push_log(FaultLog { crash_at_s: Some(t), permanent, ..FaultLog::new(event, ctx.attempt, None, Vec::new()) });
        Some(t)
    }

    fn after_backward(&mut self, ctx: &Ctx, grads: &mut Grads) -> Control {
        if ctx.point == Point::AfterBackward {
            self.corrupt_grads(ctx, grads, FaultTarget::Gradients);
        }
        Control::Continue
    }

    fn after_allreduce(&mut self, ctx: &Ctx, grads: &mut Grads) -> Control {
        self.corrupt_grads(ctx, grads, FaultTarget::ReducedGradients);
        Control::Continue
    }

    fn watch_forward(&self, ctx: &Ctx) -> bool {
        ctx.micro_batch.is_none_or(|m| m == 0) && self.neurons.iter().any(|n| n.1 == ctx.rank)
    }

    fn on_activation(&mut self, ctx: &Ctx, act: &mut Activation) -> Control {
        let hits: Vec<FaultEvent> = self.neurons.iter().filter(|n| n.1 == ctx.rank && n.2 == act.name).map(|n| n.0).collect();
        if hits.is_empty() {
            return Control::Continue;
        }
        self.neurons.retain(|n| !(n.1 == ctx.rank && n.2 == act.name));
        let shape = act.values.dims();
        let n: usize = shape.iter().product();
        let mut current = act.replacement.clone().unwrap_or_else(|| act.values.clone());
        for event in hits {
            if let Some((_, t)) = self.corrupt(event, ctx, vec![(neuron_path(&act.name), current.clone().reshape([n]))]).pop() {
                current = t.reshape(shape);
                act.replacement = Some(current.clone());
            }
        }
        Control::Continue
    }

    fn on_message(&mut self, ctx: &Ctx, msg: &mut Message) -> Control {
        let target = match msg.kind {
            MessageKind::Activation => FaultTarget::Activations,
            MessageKind::Gradient => FaultTarget::MessageGradients,
        };
        // A message fault strikes the first micro-batch's message of its step.
        if ctx.micro_batch.is_some_and(|m| m > 0) {
            return Control::Continue;
        }
        for event in self.due(ctx, &[target]) {
            let shape = msg.tensor.dims();
            let n: usize = shape.iter().product();
            let name = format!("{}/stage{}", target.name(), msg.from);
            let flat = msg.tensor.clone().reshape([n]);
            if let Some((_, t)) = self.corrupt(event, ctx, vec![(name, flat)]).pop() {
                msg.tensor = t.reshape(shape);
            }
        }
        Control::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_step_is_the_earliest_event_of_any_target() {
        let event = |id, step, target| FaultEvent { id, step, rank: 0, entry: 0, target };
        assert_eq!(FaultInjector::new(Vec::new(), Vec::new(), 1).first_step(), None);
        let events = vec![event(0, 9, FaultTarget::Crash), event(1, 4, FaultTarget::Checkpoint), event(2, 6, FaultTarget::Weights)];
        assert_eq!(FaultInjector::new(Vec::new(), events, 1).first_step(), Some(4));
    }

    #[test]
    fn the_injector_is_quiet_once_every_event_struck() {
        let event = |id, step| FaultEvent { id, step, rank: 0, entry: 0, target: FaultTarget::Checkpoint };
        assert!(FaultInjector::new(Vec::new(), Vec::new(), 1).quiescent(0));
        let mut f = FaultInjector::new(Vec::new(), vec![event(0, 4), event(1, 6)], 1);
        assert!(!f.quiescent(5));
        assert_eq!(f.due_checkpoint(4).len(), 1);
        assert!(!f.quiescent(5), "event 1 has not struck");
        assert_eq!(f.due_checkpoint(6).len(), 1);
        assert!(f.quiescent(6));
    }
}
