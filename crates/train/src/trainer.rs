use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use burn::prelude::*;
use resilab_data::{EpochOrder, Split};
use resilab_models::{InputShape, Net, Precision, for_each_param, map_params};
use serde::{Deserialize, Serialize};

use crate::allreduce::{broadcast_s, ring_allreduce_s};
use crate::hooks::{Control, Hooks, NoHooks, Point};
use crate::order::{Executions, OrderDraw, ReductionOrder};
use crate::pipeline::{Op, stage_ops, stage_ranges};
use crate::scaler::{LossScaleConfig, LossScaler};
use crate::timeline::{StepCosts, Timeline};
use crate::{
    BatchRule, Error, Evaluation, Grads, OptimizerConfig, ParallelConfig, ParallelMode, Result, ScheduleConfig, SyncKind, TrainState,
    Worker, evaluate,
};

/// Epochs of a run that gives neither `train.epochs` nor `train.steps`.
pub const DEFAULT_EPOCHS: usize = 1;

fn default_batch() -> usize {
    64
}
fn default_eval_batch() -> usize {
    500
}
fn default_log_every() -> u64 {
    10
}

/// The `[train]` section of a run configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Epochs to train ([`DEFAULT_EPOCHS`] when neither this nor `steps` is given); setting
    /// both is an error. See [`TrainConfig::epochs`].
    #[serde(default)]
    pub epochs: Option<usize>,
    /// Total optimizer steps, instead of `epochs`.
    #[serde(default)]
    pub steps: Option<u64>,
    /// Global batch size (split across data-parallel workers).
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// Batch size for evaluation.
    #[serde(default = "default_eval_batch")]
    pub eval_batch_size: usize,
    /// Write a metrics row every this many steps.
    #[serde(default = "default_log_every")]
    pub log_every: u64,
    /// Evaluate on the test split every this many steps (default: at the end of each epoch).
    #[serde(default)]
    pub eval_every: Option<u64>,
    /// Random crop (4-pixel padding) and horizontal flip of training images.
    #[serde(default)]
    pub augment: bool,
    /// The format of the forward and backward passes: `fp32`, or `bf16` or `fp16` mixed
    /// precision in the style of PyTorch's autocast (float32 master weights and optimizer
    /// state; see docs/precision.md).
    #[serde(default)]
    pub precision: Precision,
    /// fp16's dynamic loss scale (`[train.loss_scale]`; GradScaler's defaults). Used with
    /// `precision = "fp16"` only.
    #[serde(default)]
    pub loss_scale: LossScaleConfig,
    /// `fixed` (default) or `seeded`: the order in which the data-parallel all-reduce sums the
    /// workers' contributions, fixed or drawn per step and per attempt of that step (see
    /// [`ReductionOrder`]). Left out of a stored configuration when fixed.
    #[serde(default, skip_serializing_if = "ReductionOrder::is_fixed")]
    pub reduction_order: ReductionOrder,
    /// The seed of the seeded order's draws; default: the run's seed. Only with
    /// `reduction_order = "seeded"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduction_seed: Option<u64>,
    /// Golden runs in the fault-free reference of a run with faults: 1 (default), or K > 1
    /// runs differing only in `reduction_seed` (only with `reduction_order = "seeded"`), whose
    /// mean final accuracy the accuracy loss is measured against. Read by the runner; left out
    /// of a stored configuration when 1.
    #[serde(default = "default_golden_ensemble", skip_serializing_if = "is_one")]
    pub golden_ensemble: u32,
}

fn default_golden_ensemble() -> u32 {
    1
}

fn is_one(k: &u32) -> bool {
    *k == 1
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            epochs: None,
            steps: None,
            batch_size: default_batch(),
            eval_batch_size: default_eval_batch(),
            log_every: default_log_every(),
            eval_every: None,
            augment: false,
            precision: Precision::Fp32,
            loss_scale: LossScaleConfig::default(),
            reduction_order: ReductionOrder::Fixed,
            reduction_seed: None,
            golden_ensemble: default_golden_ensemble(),
        }
    }
}

impl TrainConfig {
    /// The epochs to train: `epochs`, or [`DEFAULT_EPOCHS`] when it is not given (a run with
    /// `steps` ignores this).
    pub fn epochs(&self) -> usize {
        self.epochs.unwrap_or(DEFAULT_EPOCHS)
    }

    /// Steps of the whole run for `steps_per_epoch` steps per epoch: `steps`, or `epochs`
    /// epochs (saturating at `u64::MAX`).
    pub fn total_steps(&self, steps_per_epoch: u64) -> u64 {
        self.steps.unwrap_or_else(|| (self.epochs() as u64).saturating_mul(steps_per_epoch))
    }

    /// The form written to a resolved configuration: the default epochs written out when the
    /// run is measured in epochs, and never both `epochs` and `steps`.
    pub fn resolved(&self) -> Self {
        let epochs = if self.steps.is_some() { None } else { Some(self.epochs()) };
        Self { epochs, ..self.clone() }
    }

    /// Checks the values on their own: `epochs` and `steps` not both set, counts of at least 1.
    /// Errors name the key.
    pub fn validate(&self) -> Result<()> {
        if let (Some(e), Some(s)) = (self.epochs, self.steps) {
            return Err(Error::Config(format!(
                "train.epochs = {e} and train.steps = {s} are both set: give one of them (epochs counts passes over the training set, steps optimizer steps)"
            )));
        }
        if self.epochs == Some(0) {
            return Err(Error::Config("train.epochs = 0 must be >= 1 (or set train.steps instead)".into()));
        }
        self.loss_scale.validate()?;
        if let (ReductionOrder::Fixed, Some(seed)) = (self.reduction_order, self.reduction_seed) {
            return Err(Error::Config(format!(
                "train.reduction_seed = {seed} draws the seeded summation order, but train.reduction_order = \"fixed\": set train.reduction_order = \"seeded\" or remove train.reduction_seed"
            )));
        }
        if self.golden_ensemble > 1 && self.reduction_order.is_fixed() {
            return Err(Error::Config(format!(
                "train.golden_ensemble = {} needs golden runs that differ, but train.reduction_order = \"fixed\" makes them bit-identical: set train.reduction_order = \"seeded\" or train.golden_ensemble = 1",
                self.golden_ensemble
            )));
        }
        for (key, v) in [
            ("train.golden_ensemble", u64::from(self.golden_ensemble)),
            ("train.batch_size", self.batch_size as u64),
            ("train.eval_batch_size", self.eval_batch_size as u64),
            ("train.log_every", self.log_every),
            ("train.eval_every", self.eval_every.unwrap_or(1)),
        ] {
            if v == 0 {
                return Err(Error::Config(format!("{key} = 0 must be >= 1")));
            }
        }
        Ok(())
    }

    /// Checks that `device` holds tensors in the half format of `precision` (the emulation
    /// rounds through it); an error names the key.
    pub fn check_device(&self, device: &Device) -> Result<()> {
        match self.precision.half() {
            Some(h) if !device.supports_dtype(h) => Err(Error::Config(format!(
                "train.precision = \"{}\": this device has no {} tensors; train in fp32 or on a CPU backend (flex, native)",
                self.precision, self.precision
            ))),
            _ => Ok(()),
        }
    }

    /// Checks, before any data is loaded, that a training batch and an evaluation batch of
    /// `data`'s images fit in the memory budget (as f32 tensors; the network's
    /// activations come on top), and for synthetic data, whose size is known, that
    /// `batch_size` is at most `train_size`. An evaluation batch is never larger than the test
    /// set, so `eval_batch_size` counts up to the test set's size where that is known. Nothing
    /// else is sized by the configuration: the epoch order holds one index per training image,
    /// and a step allocates its batch and the network's activations and gradients.
    pub fn check_sizes(&self, data: &resilab_data::DataConfig) -> Result<()> {
        let (channels, size, _) = data.shape();
        let synthetic = data.source == resilab_data::DataSource::Synthetic;
        let train_len = if synthetic { Some(data.train_size.unwrap_or(resilab_data::DEFAULT_TRAIN_SIZE)) } else { data.train_size };
        let test_len = if synthetic { Some(data.test_size.unwrap_or(resilab_data::DEFAULT_TEST_SIZE)) } else { data.test_size };
        if synthetic && let Some(n) = train_len.filter(|&n| self.batch_size > n) {
            return Err(Error::Config(format!(
                "train.batch_size = {} must be between 1 and the training set size ({n}, data.train_size)",
                self.batch_size
            )));
        }
        // An f32 per pixel and an i64 label per image.
        let per_image =
            resilab_data::limits::checked_product(&[channels as u64, size as u64, size as u64, 4]).and_then(|b| b.checked_add(8));
        let eval = test_len.map_or(self.eval_batch_size, |n| self.eval_batch_size.min(n));
        for (key, value, images, what) in [
            ("train.batch_size", self.batch_size, self.batch_size, "a training batch"),
            ("train.eval_batch_size", self.eval_batch_size, eval, "an evaluation batch"),
        ] {
            let bytes = per_image.and_then(|b| b.checked_mul(images as u64));
            resilab_data::check_memory(key, &value, bytes, what)?;
        }
        Ok(())
    }
}

/// What one global step produced, over the workers that contributed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StepStats {
    /// Global step number (1-based: the number of steps completed).
    pub step: u64,
    /// Epoch the batch belonged to (0-based).
    pub epoch: usize,
    /// Mean of the contributing shards' (or micro-batches') losses; NaN if none contributed.
    pub loss: f64,
    /// Training accuracy on the contributing part of the global batch.
    pub train_acc: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Whether this step completed an epoch.
    pub epoch_end: bool,
    /// Simulated wall time of the step on a real parallel machine (see the cost model).
    pub sim_s: f64,
    /// Simulated communication time of the step (all-reduce and broadcast, or all messages).
    pub comm_s: f64,
    /// Bytes moved over the network in the step, all links together.
    pub comm_bytes: u64,
    /// Measured seconds of forward and backward passes, all workers (stages) together.
    pub compute_s: f64,
    /// Measured seconds of optimizer updates, all workers (stages) together.
    pub update_s: f64,
    /// Contributions left out at a hook's request (workers, or dropped micro-batches).
    pub skipped: u32,
    /// Times the step was undone and run again.
    pub redos: u32,
    /// Simulated seconds of the attempts thrown away (each charged as a whole step: the damage
    /// is found at the end of a step at the latest), within `sim_s`.
    pub redo_s: f64,
    /// Bytes of model and optimizer state copied before the step so that it can be undone
    /// (the largest worker's; zero unless the hooks can undo).
    pub snapshot_bytes: u64,
    /// Simulated seconds of that copy, and of the restores of redone attempts, at
    /// `parallel.compute.memory_gbps`, within `sim_s`.
    pub snapshot_s: f64,
    /// The loss scale the step's losses were multiplied by (worker 0's), with fp16's loss
    /// scaler (`train.precision = "fp16"`); `None` without one.
    pub loss_scale: Option<f64>,
    /// Workers (stages) whose loss scaler found an infinity or a NaN in the gradients and
    /// skipped the update.
    pub overflows: u32,
}

/// The modelled time of a worker's optimizer update, when compute is modelled: its state read
/// and written once and its gradients read, at the memory bandwidth.
fn modelled_update_s(p: &ParallelConfig, w: &Worker) -> Option<f64> {
    let mut params = 0usize;
    resilab_models::for_each_param(&w.net, |info, t| {
        if info.trainable {
            params += t.dims()[0];
        }
    });
    p.compute.gflops.map(|_| p.compute.copy_s(2 * w.state_bytes() + 4 * params as u64))
}

/// What a step's attempts were, for [`Trainer::charge_attempts`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Attempts {
    /// Times the step was undone and run again.
    pub redos: u32,
    /// Attempts thrown away as whole steps.
    pub whole: u32,
    /// Simulated seconds of attempts abandoned part-way.
    pub partial_s: f64,
    /// Bytes copied before the step so that it can be undone (the largest worker's; zero
    /// unless the hooks can undo).
    pub snapshot_bytes: u64,
}

/// How a step ended.
#[derive(Clone, Debug, PartialEq)]
pub enum StepOutcome {
    /// The step completed.
    Done(StepStats),
    /// A hook returned [`Control::Restore`]; the trainer now holds that state.
    Restored {
        /// Where the hook was called.
        point: Point,
        /// Worker or stage whose hook asked.
        rank: usize,
    },
    /// A hook returned [`Control::Stop`]; the step did not complete.
    Stopped {
        /// Where the hook was called.
        point: Point,
        /// Worker or stage whose hook asked.
        rank: usize,
        /// Simulated seconds the step had run when it stopped (a crash's time in the step;
        /// 0 for other stops).
        lost_s: f64,
    },
}

/// Everything that configures a trainer besides the model and data.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainSpec {
    /// Training loop.
    pub train: TrainConfig,
    /// Optimizer.
    pub optimizer: OptimizerConfig,
    /// Learning-rate schedule.
    pub schedule: ScheduleConfig,
    /// Workers or stages.
    pub parallel: ParallelConfig,
    /// Seed of the data order and of the workers' random streams.
    pub seed: u64,
}

/// Most redos of one step before the trainer gives up.
pub const MAX_REDOS: u32 = 16;

enum Topology {
    Data(Arc<plan::DataPlan>),
    /// Each stage's block range, and each stage's schedule of operations (shared with the steps).
    Pipeline {
        ranges: Vec<Range<usize>>,
        ops: Arc<Vec<Vec<Op>>>,
    },
}

/// How a hook's control value ends a step early.
enum Flow {
    Done(StepStats),
    /// Undo and run again; with the simulated seconds the attempt ran before it was abandoned
    /// (`None`: a whole step, as for damage found at the end of a step at the latest).
    Redo(Option<f64>),
    Restore(Box<TrainState>, Point, usize),
    /// End the step, after this many simulated seconds of it.
    Stop(Point, usize, f64),
}

/// `Continue` and `Skip` let the step go on; anything else ends it.
fn early(c: Control, point: Point, rank: usize) -> Option<Flow> {
    match c {
        Control::Continue | Control::Skip => None,
        Control::Redo => Some(Flow::Redo(None)),
        Control::Restore(s) => Some(Flow::Restore(s, point, rank)),
        Control::Stop => Some(Flow::Stop(point, rank, 0.0)),
    }
}

macro_rules! hook {
    ($call:expr, $point:expr, $rank:expr) => {{
        let c = $call;
        let skip = matches!(c, Control::Skip);
        if let Some(f) = early(c, $point, $rank) {
            return Ok(f);
        }
        skip
    }};
}

/// A phase's result: go on with a value, or end the step with a flow.
type Phase<T> = Result<std::ops::ControlFlow<Flow, T>>;

/// Like `hook!`, inside a phase: ends the step on an early control.
macro_rules! hook_phase {
    ($call:expr, $point:expr, $rank:expr) => {{
        let c = $call;
        let skip = matches!(c, Control::Skip);
        if let Some(f) = early(c, $point, $rank) {
            return Ok(std::ops::ControlFlow::Break(f));
        }
        skip
    }};
}

/// Ends the step when a phase says so.
macro_rules! phase {
    ($e:expr) => {
        match $e? {
            std::ops::ControlFlow::Continue(v) => v,
            std::ops::ControlFlow::Break(f) => return Ok(f),
        }
    };
}

/// Inside a phase: ends the phase, and so the step, when a phase it runs says so.
macro_rules! sub_phase {
    ($e:expr) => {
        if let std::ops::ControlFlow::Break(f) = $e? {
            return Ok(std::ops::ControlFlow::Break(f));
        }
    };
}

/// The losses and correct predictions of the parts of a step that count (workers' shards, or
/// micro-batches).
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    loss_sum: f64,
    parts: usize,
    correct: usize,
    images: usize,
}

impl Tally {
    fn add(&mut self, loss: f64, correct: usize, images: usize) {
        self.loss_sum += loss;
        self.parts += 1;
        self.correct += correct;
        self.images += images;
    }
}

/// Waits for the device to finish queued work, so that timings cover the work itself on
/// devices that run asynchronously (GPUs); CPU backends return at once.
fn sync(device: &Device) -> Result<()> {
    device.sync().map_err(|e| Error::State(format!("the device failed to run queued work: {e:?}")))
}

fn missing(what: &str, s: usize, m: usize) -> Error {
    Error::State(format!("pipeline step: {what} of stage {s}, micro-batch {m} is missing (schedule out of order)"))
}

/// Drives workers through synchronous steps: data-parallel replicas (each computes gradients on
/// its shard, the gradients are all-reduced, each replica applies the average with its own
/// optimizer state) or pipeline stages (micro-batches flow forward and back through the stages,
/// each stage accumulates its gradients and applies one update). A single-process run is the
/// one-worker case.
pub struct Trainer {
    /// The workers in rank order (the stages, in a pipeline).
    pub workers: Vec<Worker>,
    /// Steps completed.
    pub step: u64,
    /// Training-loop settings.
    pub config: TrainConfig,
    /// Optimizer settings.
    pub optimizer: OptimizerConfig,
    /// Learning-rate schedule.
    pub schedule: ScheduleConfig,
    /// Workers or stages.
    pub parallel: ParallelConfig,
    /// Seed of the data order.
    pub seed: u64,
    /// The data.
    pub data: Arc<Split>,
    device: Device,
    order: EpochOrder,
    topology: Topology,
    /// Forward FLOPs per image of each worker's network (for the modelled compute time).
    fwd_flops: Vec<u64>,
    /// The slowest worker's measured update seconds of the last step (compute not modelled),
    /// for the timeline a crash is placed on before this step's updates run.
    update_estimate_s: Option<f64>,
    /// Workers the job started with (`parallel.workers`, or the stages).
    world0: usize,
    /// How the batch is sized once data-parallel workers were removed for good (`None`: no
    /// worker was removed).
    shrunk: Option<BatchRule>,
    /// How many times each step index has been executed in this run (the seeded summation
    /// order's attempt number).
    executions: Executions,
}

mod data;
mod pipe;
mod plan;
mod restore;

/// A fault-free data-parallel step as the cost model sees it, without running it: the
/// projection of recovery costs to worker counts too large to simulate uses it.
#[derive(Clone, Debug)]
pub struct StepModel {
    /// The step's costs on the given number of workers.
    pub costs: StepCosts,
    /// Its timeline.
    pub timeline: Timeline,
    /// Per bucket: its all-reduce over one worker fewer.
    pub survivor_reduce_s: Vec<f64>,
    /// Bytes of one worker's model (parameters and buffers) and optimizer state.
    pub state_bytes: u64,
}

impl StepModel {
    /// The step of `net` on `workers` workers with `shard` images each, under `parallel`'s
    /// cost model; `None` unless `parallel.compute.gflops` models the compute.
    pub fn new(
        net: &Net,
        input: InputShape,
        parallel: &ParallelConfig,
        optimizer: &OptimizerConfig,
        shard: usize,
        workers: usize,
    ) -> Option<Self> {
        let flops: u64 = net.block_costs(input).iter().map(|b| b.flops).sum();
        let compute = parallel.compute.flops_s(3.0 * flops as f64 * shard as f64)?;
        let parallel = ParallelConfig { workers, ..parallel.clone() };
        let layout = plan::DataPlan::new(net, &parallel, input);
        let bytes = &layout.bucket_bytes;
        let start_s =
            if parallel.sync == SyncKind::Ddp && workers > 1 { broadcast_s(&parallel.network, layout.buffer_bytes, workers) } else { 0.0 };
        let costs = StepCosts {
            start_s,
            forward_s: vec![Some(compute / 3.0); workers],
            backward_s: vec![2.0 * compute / 3.0; workers],
            ready_frac: layout.ready_frac.clone(),
            reduce_s: bytes.iter().map(|&b| ring_allreduce_s(&parallel.network, b, workers)).collect(),
            update_s: plan::modelled_bucket_updates(&parallel, optimizer, bytes),
            not_before_s: vec![0.0; bytes.len()],
        };
        let survivor_reduce_s = bytes.iter().map(|&b| ring_allreduce_s(&parallel.network, b, workers.saturating_sub(1))).collect();
        // Every trainable parameter is in one bucket.
        let trainable: u64 = bytes.iter().sum();
        let state_bytes = layout.buffer_bytes + trainable * (1 + plan::optimizer_buffers(optimizer));
        Some(Self { timeline: Timeline::build(&costs), costs, survivor_reduce_s, state_bytes })
    }

    /// The step's end when a worker crashes at `at_s` and the survivors finish it (lossy
    /// forward).
    pub fn end_after_crash(&self, at_s: f64) -> f64 {
        let completed = self.timeline.completed_buckets(at_s);
        Timeline::build(&self.costs.after_crash(at_s, completed, &self.survivor_reduce_s)).end_s
    }

    /// The step over one worker fewer, each keeping its shard (rollback's redo without
    /// rebalancing).
    pub fn survivors_step_s(&self) -> f64 {
        let mut c = self.costs.clone();
        c.forward_s.pop();
        c.backward_s.pop();
        c.reduce_s.clone_from(&self.survivor_reduce_s);
        Timeline::build(&c).end_s
    }
}

impl Trainer {
    /// A trainer for `net` as `spec` describes: `workers` replicas of it (deep copies: resilab's
    /// modules hold no shared state, so `clone()` copies), or its blocks cut into `stages`.
    pub fn new(net: Net, spec: TrainSpec, data: Arc<Split>, device: Device) -> Result<Self> {
        let TrainSpec { train: config, optimizer, schedule, parallel, seed } = spec;
        config.validate()?;
        config.check_device(&device)?;
        optimizer.validate()?;
        schedule.validate()?;
        parallel.validate(config.batch_size)?;
        if config.reduction_order == ReductionOrder::Seeded && parallel.mode == ParallelMode::Pipeline {
            return Err(Error::Config(
                "train.reduction_order = \"seeded\" draws the order of the data-parallel all-reduce; a pipeline (parallel.mode = \"pipeline\") has none: use \"fixed\"".into(),
            ));
        }
        let world = parallel.world();
        let net = net.with_precision(config.precision);
        if config.batch_size == 0 || config.batch_size > data.train.len() {
            return Err(Error::Config(format!(
                "train.batch_size = {} must be between 1 and the training set size ({})",
                config.batch_size,
                data.train.len()
            )));
        }
        let (mut workers, topology): (Vec<Worker>, _) = match parallel.mode {
            ParallelMode::Data => {
                let input = InputShape { channels: data.train.channels, size: data.train.size };
                let layout = plan::DataPlan::new(&net, &parallel, input);
                let workers: Vec<Worker> = (0..world).map(|r| Worker::new(r, net.clone(), seed)).collect();
                (workers, Topology::Data(Arc::new(layout)))
            }
            ParallelMode::Pipeline => {
                let input = InputShape { channels: data.train.channels, size: data.train.size };
                let ranges = stage_ranges(&net.block_costs(input), &parallel)?;
                let workers = ranges.iter().enumerate().map(|(s, r)| Worker::new(s, net.slice(r.clone()), seed)).collect();
                let ops = (0..world).map(|s| stage_ops(parallel.schedule, s, world, parallel.micro_batches)).collect();
                (workers, Topology::Pipeline { ranges, ops: Arc::new(ops) })
            }
        };
        for w in workers.iter_mut().filter(|_| config.precision.scales_loss()) {
            w.scaler = Some(LossScaler::new(&config.loss_scale));
        }
        let order = EpochOrder::new(seed, 0, data.train.len());
        let input = InputShape { channels: data.train.channels, size: data.train.size };
        let fwd_flops = workers.iter().map(|w| w.net.block_costs(input).iter().map(|b| b.flops).sum()).collect();
        Ok(Self {
            workers,
            step: 0,
            config,
            optimizer,
            schedule,
            parallel,
            seed,
            data,
            device,
            order,
            topology,
            fwd_flops,
            update_estimate_s: None,
            world0: world,
            shrunk: None,
            executions: Executions::default(),
        })
    }

    /// Bytes of every worker's model and optimizer state together (what a checkpoint holds).
    pub fn state_bytes(&self) -> u64 {
        self.workers.iter().map(Worker::state_bytes).sum()
    }

    /// Optimizer steps per epoch (full global batches; a last partial batch is dropped).
    pub fn steps_per_epoch(&self) -> u64 {
        (self.data.train.len() / self.config.batch_size) as u64
    }

    /// Steps of the whole run.
    pub fn total_steps(&self) -> u64 {
        self.config.total_steps(self.steps_per_epoch())
    }

    /// Whether the run is complete.
    pub fn done(&self) -> bool {
        self.step >= self.total_steps()
    }

    /// The seed of the seeded summation order: `train.reduction_seed`, or the run's seed.
    pub fn reduction_seed(&self) -> u64 {
        self.config.reduction_seed.unwrap_or(self.seed)
    }

    /// How many times step `step` (1-based) has been executed in this run, redone and
    /// recomputed executions included; a step up to a state put in by [`Trainer::restore`]
    /// counts at least once.
    pub fn executions(&self, step: u64) -> u32 {
        self.executions.of(step)
    }

    /// Counts a new execution of step `step` and returns the order its all-reduce sums in.
    fn order_draw(&mut self, step: u64) -> OrderDraw {
        let attempt = self.executions.begin(step);
        match self.config.reduction_order {
            ReductionOrder::Fixed => OrderDraw::Fixed,
            ReductionOrder::Seeded => OrderDraw::Seeded { seed: self.reduction_seed(), step, attempt },
        }
    }

    /// The device training runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Learning rate of the next step: the schedule's, times [`Trainer::lr_scale`].
    pub fn lr(&self) -> f64 {
        self.schedule.lr(self.optimizer.lr, self.step, self.steps_per_epoch(), self.total_steps()) * self.lr_scale()
    }

    /// Images of the next global batch: `train.batch_size`, or, after workers were removed
    /// under [`BatchRule::KeepPerWorker`], the per-worker batch times the workers left.
    pub fn global_batch_size(&self) -> usize {
        match self.shrunk {
            Some(BatchRule::KeepPerWorker) => self.config.batch_size / self.world0 * self.workers.len(),
            _ => self.config.batch_size,
        }
    }

    /// The linear scaling rule: the learning rate is scaled by the global batch's share of
    /// `train.batch_size` (1 unless the batch shrank).
    pub fn lr_scale(&self) -> f64 {
        self.global_batch_size() as f64 / self.config.batch_size as f64
    }

    /// The batch rule in force since workers were removed for good (`None`: none was).
    pub fn batch_rule(&self) -> Option<BatchRule> {
        self.shrunk
    }

    /// Removes data-parallel worker `rank` for good (its node is gone and the job goes on
    /// without it, as ULFM's shrunk communicator does): the workers after it move down one rank,
    /// keeping their state and random streams, and from the next step the global batch is
    /// spread over the workers left, sized by `rule`. The data cursor is kept, so the epoch
    /// goes on from the image where it stopped.
    pub fn remove_worker(&mut self, rank: usize, rule: BatchRule) -> Result<()> {
        if self.stage_ranges().is_some() {
            return Err(Error::Config("a pipeline cannot go on without a stage: only data-parallel workers can be removed".into()));
        }
        if rank >= self.workers.len() {
            return Err(Error::State(format!("cannot remove worker {rank}: the job has {} worker(s)", self.workers.len())));
        }
        if self.workers.len() == 1 {
            return Err(Error::State("cannot remove the last worker: nothing would be left to train".into()));
        }
        if rule == BatchRule::KeepPerWorker && !self.config.batch_size.is_multiple_of(self.world0) {
            return Err(Error::Config(format!(
                "keeping the per-worker batch needs train.batch_size ({}) to be a multiple of the {} workers",
                self.config.batch_size, self.world0
            )));
        }
        self.workers.remove(rank);
        self.fwd_flops.remove(rank);
        for (r, w) in self.workers.iter_mut().enumerate() {
            w.rank = r;
        }
        self.shrunk = Some(rule);
        Ok(())
    }

    /// The block ranges of the pipeline stages (`None` for data parallelism).
    pub fn stage_ranges(&self) -> Option<&[Range<usize>]> {
        match &self.topology {
            Topology::Pipeline { ranges, .. } => Some(ranges),
            Topology::Data(_) => None,
        }
    }

    /// The all-reduce buckets, `(parameter name, values)` in reduction order (`None` for a pipeline).
    pub fn buckets(&self) -> Option<&[Vec<(String, usize)>]> {
        match &self.topology {
            Topology::Data(d) => Some(&d.plan.buckets),
            Topology::Pipeline { .. } => None,
        }
    }

    /// The whole model: worker 0's replica, or the stages joined.
    pub fn model(&self) -> Net {
        match self.topology {
            Topology::Data(_) => self.workers[0].net.clone(),
            Topology::Pipeline { .. } => Net::join(&self.workers.iter().map(|w| w.net.clone()).collect::<Vec<_>>()),
        }
    }

    /// Runs one global step without hooks.
    pub fn step(&mut self) -> Result<StepStats> {
        match self.step_with(&mut NoHooks)? {
            StepOutcome::Done(s) => Ok(s),
            other => Err(Error::State(format!("a step without hooks ended early: {other:?}"))),
        }
    }

    /// Runs one global step, calling `hooks` at the fixed points and carrying out what they
    /// return.
    pub fn step_with(&mut self, hooks: &mut dyn Hooks) -> Result<StepOutcome> {
        let saved = hooks.undo().then(|| self.workers.clone());
        let snapshot_bytes = if saved.is_some() { self.workers.iter().map(Worker::state_bytes).max().unwrap_or(0) } else { 0 };
        let mut attempt = 0;
        // Attempts thrown away: whole steps, and seconds of attempts abandoned part-way.
        let (mut whole, mut partial_s) = (0u32, 0.0);
        loop {
            let flow = match self.topology {
                Topology::Data(_) => self.data_step(hooks, attempt)?,
                Topology::Pipeline { .. } => self.pipeline_step(hooks, attempt)?,
            };
            match flow {
                Flow::Done(mut s) => {
                    self.charge_attempts(&mut s, Attempts { redos: attempt, whole, partial_s, snapshot_bytes });
                    return Ok(StepOutcome::Done(s));
                }
                Flow::Redo(lost) => {
                    match lost {
                        Some(t) => partial_s += t,
                        None => whole += 1,
                    }
                    let Some(w) = &saved else {
                        return Err(Error::Config("a hook asked to redo the step, but Hooks::undo() is false".into()));
                    };
                    if attempt >= MAX_REDOS {
                        return Err(Error::State(format!("step {} was redone {MAX_REDOS} times and never completed", self.step + 1)));
                    }
                    self.workers = w.clone();
                    attempt += 1;
                }
                Flow::Restore(state, point, rank) => {
                    self.restore(&state)?;
                    return Ok(StepOutcome::Restored { point, rank });
                }
                Flow::Stop(point, rank, lost_s) => return Ok(StepOutcome::Stopped { point, rank, lost_s }),
            }
        }
    }

    /// Adds to a completed step's statistics (`s.sim_s` the last attempt's time alone) what its
    /// attempts cost: the redos, the attempts thrown away and the copy that made them possible.
    /// [`Trainer::step_with`] charges every step through it; a caller that replays a recorded
    /// step charges it the same way.
    pub fn charge_attempts(&self, s: &mut StepStats, a: Attempts) {
        s.redos = a.redos;
        s.redo_s = f64::from(a.whole) * s.sim_s + a.partial_s;
        s.snapshot_bytes = a.snapshot_bytes;
        s.snapshot_s = f64::from(1 + a.redos) * self.parallel.compute.copy_s(a.snapshot_bytes);
        s.sim_s += s.redo_s + s.snapshot_s;
    }

    /// The global batch of the next step and the cursor it is read at.
    fn global_batch(&mut self) -> (crate::Cursor, Vec<usize>) {
        let cursor = self.workers[0].cursor;
        if self.order.epoch != cursor.epoch {
            self.order = EpochOrder::new(self.seed, cursor.epoch, self.data.train.len());
        }
        let end = (cursor.sample + self.global_batch_size()).min(self.order.indices.len());
        (cursor, self.order.indices[cursor.sample.min(end)..end].to_vec())
    }

    /// The cursor after a step that read `taken` images.
    fn next_cursor(&self, c: crate::Cursor, taken: usize) -> crate::Cursor {
        c.advance(taken, self.global_batch_size(), self.data.train.len())
    }

    /// Worker `r` applies `grads` with learning rate `lr` when `apply`, then waits for the
    /// device: the update's seconds, measured or (with modelled compute) modelled.
    fn update_worker(&mut self, r: usize, grads: &Grads, apply: bool, lr: f64) -> Result<f64> {
        let w = &mut self.workers[r];
        let t = Instant::now();
        if apply {
            let net = w.net.take();
            w.net = w.optim.step(&self.optimizer, lr, net, grads);
        }
        sync(&self.device)?;
        Ok(modelled_update_s(&self.parallel, w).unwrap_or_else(|| t.elapsed().as_secs_f64()))
    }

    /// The statistics of the step just completed (`self.step`), of a batch from epoch `epoch`:
    /// its loss and accuracy from `tally`; the times are the caller's to fill in.
    fn step_stats(&self, epoch: usize, lr: f64, tally: &Tally) -> StepStats {
        StepStats {
            step: self.step,
            epoch,
            loss: if tally.parts > 0 { tally.loss_sum / tally.parts as f64 } else { f64::NAN },
            train_acc: if tally.images > 0 { tally.correct as f64 / tally.images as f64 } else { f64::NAN },
            lr,
            epoch_end: self.workers[0].cursor.epoch != epoch,
            ..StepStats::default()
        }
    }

    /// Test-set evaluation of the model (worker 0's replica, or the joined stages).
    pub fn evaluate(&self) -> Evaluation {
        evaluate(&self.model(), &self.data.test, &self.data.norm, self.config.eval_batch_size, &self.device)
    }

    /// Test-set evaluation of every data-parallel replica, in rank order (one evaluation of the
    /// joined stages for a pipeline). With `next_forward`, each replica as its next forward pass
    /// sees it: under DDP with rank 0's buffers (PyTorch's `broadcast_buffers`), under Horovod
    /// with its own; without, every replica as it is.
    pub fn evaluate_replicas(&self, next_forward: bool) -> Vec<Evaluation> {
        if self.stage_ranges().is_some() || self.workers.len() < 2 {
            return vec![self.evaluate()];
        }
        let mut workers: Vec<Worker> = self.workers.clone();
        if next_forward && self.parallel.sync == SyncKind::Ddp {
            broadcast_buffers(&mut workers);
        }
        // Replicas with the same parameters and buffers give the same evaluation: each distinct
        // one is evaluated once (after a DDP restart, usually all of them are alike).
        let mut seen: Vec<(Vec<u32>, Evaluation)> = Vec::new();
        let mut out = Vec::with_capacity(workers.len());
        for w in &workers {
            let bits = net_bits(&w.net);
            let e = match seen.iter().find(|(b, _)| *b == bits) {
                Some((_, e)) => *e,
                None => {
                    let e = evaluate(&w.net, &self.data.test, &self.data.norm, self.config.eval_batch_size, &self.device);
                    seen.push((bits, e));
                    e
                }
            };
            out.push(e);
        }
        out
    }
}

/// Every parameter and buffer of `net`, as bits in visiting order: equal for two nets exactly
/// when they compute the same function (a NaN equals itself here).
fn net_bits(net: &Net) -> Vec<u32> {
    let mut bits = Vec::new();
    for_each_param(net, |_, t| bits.extend(t.into_data().convert::<f32>().iter::<f32>().map(f32::to_bits)));
    bits
}

/// Copies rank 0's buffers (BatchNorm running statistics) into every other replica, as DDP does
/// before each forward.
fn broadcast_buffers(workers: &mut [Worker]) {
    let mut buffers = BTreeMap::new();
    for_each_param(&workers[0].net, |info, t| {
        if !info.trainable {
            buffers.insert(info.name.clone(), t);
        }
    });
    for w in &mut workers[1..] {
        let net = w.net.clone();
        w.net = map_params(net, |info, _| if info.trainable { None } else { buffers.get(&info.name).cloned() });
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use resilab_data::DataConfig;

    fn err(c: &TrainConfig) -> String {
        c.validate().unwrap_err().to_string()
    }

    #[test]
    fn a_batch_over_the_budget_is_a_budget_error_naming_its_key() {
        let c = TrainConfig { batch_size: 1 << 40, ..TrainConfig::default() };
        let data = DataConfig { source: resilab_data::DataSource::Cifar10, ..DataConfig::default() };
        let e = c.check_sizes(&data).unwrap_err();
        assert!(matches!(&e, Error::Budget(resilab_data::limits::Error::Budget(r)) if r.key == "train.batch_size"), "{e:?}");
    }

    #[test]
    fn epochs_and_steps_exclude_each_other() {
        let both = TrainConfig { epochs: Some(4), steps: Some(100), ..TrainConfig::default() };
        assert_eq!(
            err(&both),
            "train.epochs = 4 and train.steps = 100 are both set: give one of them (epochs counts passes over the training set, steps optimizer steps)"
        );
        let steps = TrainConfig { steps: Some(100), ..TrainConfig::default() };
        steps.validate().unwrap();
        assert_eq!(steps.total_steps(7), 100);
        assert_eq!(steps.resolved().epochs, None);
        let default = TrainConfig::default();
        assert_eq!(default.total_steps(7), DEFAULT_EPOCHS as u64 * 7);
        assert_eq!(default.resolved().epochs, Some(DEFAULT_EPOCHS));
        assert_eq!(TrainConfig { epochs: Some(usize::MAX), ..default.clone() }.total_steps(3), u64::MAX);
        assert!(err(&TrainConfig { epochs: Some(0), ..default.clone() }).contains("train.epochs = 0"));
        assert!(err(&TrainConfig { eval_every: Some(0), ..default.clone() }).contains("train.eval_every = 0"));
        assert!(err(&TrainConfig { batch_size: 0, ..default }).contains("train.batch_size = 0"));
    }

    #[test]
    fn a_reduction_seed_needs_the_seeded_order() {
        let fixed = TrainConfig { reduction_seed: Some(3), ..TrainConfig::default() };
        assert!(
            err(&fixed).starts_with("train.reduction_seed = 3 draws the seeded summation order, but train.reduction_order = \"fixed\"")
        );
        TrainConfig { reduction_order: ReductionOrder::Seeded, ..fixed }.validate().unwrap();
    }

    #[test]
    fn batch_sizes_are_checked_against_memory_and_the_data() {
        let data = DataConfig::default();
        let ok = TrainConfig::default();
        ok.check_sizes(&data).unwrap();
        let e = TrainConfig { batch_size: 1 << 40, ..ok.clone() }
            .check_sizes(&DataConfig { train_size: Some(usize::MAX >> 8), ..data.clone() });
        let e = e.unwrap_err().to_string();
        assert!(e.starts_with("train.batch_size = 1099511627776 needs 13519594975133696 bytes"), "{e}");
        let e = TrainConfig { batch_size: 6000, ..ok.clone() }.check_sizes(&data).unwrap_err().to_string();
        assert!(e.contains("train.batch_size = 6000") && e.contains("5000"), "{e}");
        // An evaluation batch larger than the test set is the test set.
        TrainConfig { eval_batch_size: usize::MAX, ..ok.clone() }.check_sizes(&data).unwrap();
        let real = DataConfig { source: resilab_data::DataSource::Cifar10, ..data };
        let e = TrainConfig { eval_batch_size: usize::MAX, ..ok }.check_sizes(&real).unwrap_err().to_string();
        assert!(e.starts_with("train.eval_batch_size = 18446744073709551615 needs more than 2^64 bytes"), "{e}");
    }
}
