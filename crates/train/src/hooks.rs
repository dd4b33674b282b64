//! Hooks: the fixed points of a training step where fault injection, detection and recovery
//! plug in. Training calls them and carries out the [`Control`] they return; it never depends on
//! what implements them.
//!
//! Order within one data-parallel step: DDP's broadcast of rank 0's buffers; then
//! [`Hooks::before_step`] for every worker in rank order; then for every worker that goes on, in rank order: forward (with [`Hooks::on_activation`] on every block's output when
//! [`Hooks::watch_forward`] asks for it), backward, [`Hooks::after_pass`], [`Hooks::after_loss`], [`Hooks::after_backward`];
//! then, once the step's [`Timeline`] is known, [`Hooks::crash_time`] per computing worker and
//! [`Hooks::on_crash`] for each that crashes; then the all-reduce; then per surviving worker [`Hooks::after_allreduce`] (its own copy of the reduced
//! gradients), optimizer step, [`Hooks::after_optimizer_step`]. In a pipeline step the worker is
//! a stage: [`Hooks::before_step`] per stage, [`Hooks::on_activation`] inside a stage's forward
//! when watched, [`Hooks::on_message`] on every activation and
//! gradient passed between stages, [`Hooks::after_loss`] per micro-batch on the last stage,
//! then per stage [`Hooks::after_pass`], [`Hooks::after_backward`] (accumulated gradients), optimizer step and
//! [`Hooks::after_optimizer_step`]. There is no all-reduce in a pipeline step.

use burn::prelude::*;
use resilab_models::Precision;

use crate::{Grads, Timeline, TrainState, Worker};

/// Where in the step a hook is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    /// Before the worker's forward pass.
    BeforeStep,
    /// After the loss of a shard (or of a micro-batch on the last stage).
    AfterLoss,
    /// After the local backward pass, before the all-reduce.
    AfterBackward,
    /// After the all-reduce, on the copy of the reduced gradients one replica applies.
    AfterAllReduce,
    /// After the worker's optimizer step.
    AfterOptimizerStep,
    /// On a message between pipeline stages.
    Message,
    /// On a block's output during the forward pass.
    Forward,
    /// A worker crashed inside the step (at a time of the step's [`Timeline`]).
    Crash,
}

/// A worker's crash inside a data-parallel step, as [`Hooks::on_crash`] sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Crash {
    /// Simulated seconds from the step's start.
    pub at_s: f64,
    /// The step's simulated duration without the crash.
    pub step_s: f64,
    /// Buckets whose all-reduce had ended: their reduced gradients, which include the crashed
    /// worker's, reached every survivor. The next bucket, if any, was in flight.
    pub completed_buckets: usize,
    /// Buckets in the step.
    pub buckets: usize,
    /// What the crashed worker was doing when it crashed (the first one, when several crash
    /// in the step), on the timeline the crash was placed on.
    pub phase: crate::Phase,
}

/// Who and when: passed to every hook.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ctx {
    /// The step being computed (1-based: `Trainer::step + 1`).
    pub step: u64,
    /// Worker rank (data parallel) or stage index (pipeline).
    pub rank: usize,
    /// Number of workers or stages.
    pub world: usize,
    /// 0 for the first execution of the step, then 1, 2, ... for each redo.
    pub attempt: u32,
    /// The micro-batch, for pipeline messages and last-stage losses.
    pub micro_batch: Option<usize>,
    /// Where the hook is called.
    pub point: Point,
    /// The loss scale the worker's gradients carry until its loss scaler unscales them, after
    /// the all-reduce (fp16, `train.precision`); `None` in other formats.
    pub loss_scale: Option<f32>,
    /// The format the worker's forward and backward passes compute in (`train.precision`):
    /// in bf16 and fp16 its activations, messages and gradients hold half values.
    pub precision: Precision,
}

/// What a hook asks the training loop to do.
#[derive(Clone, Debug, Default)]
pub enum Control {
    /// Go on.
    #[default]
    Continue,
    /// Leave this worker's contribution out. Before the step or after backward: the worker's
    /// gradient is not part of the all-reduce (the average is over the others; a pipeline stage
    /// that skips applies no update). After the all-reduce: this replica does not apply the
    /// update. On a message or a last-stage loss: the micro-batch is dropped from every stage's
    /// gradient. After the optimizer step it has no effect.
    Skip,
    /// Undo everything this step did and run it again (needs [`Hooks::undo`] to be true).
    Redo,
    /// End the step and restore this state instead.
    Restore(Box<TrainState>),
    /// End the step now; the run stops.
    Stop,
}

/// Loss of one shard or micro-batch, as the after-loss hook sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossInfo {
    /// Mean cross-entropy over the shard or micro-batch.
    pub loss: f64,
    /// Correct top-1 predictions.
    pub correct: usize,
    /// Images.
    pub count: usize,
}

/// What a pipeline message carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// A stage's output activations, sent forward.
    Activation,
    /// The gradient of the loss with respect to a stage's input, sent backward.
    Gradient,
}

/// A tensor sent from one pipeline stage to another.
#[derive(Clone, Debug)]
pub struct Message {
    /// Activation or gradient.
    pub kind: MessageKind,
    /// Sending stage.
    pub from: usize,
    /// Receiving stage.
    pub to: usize,
    /// The values, `[micro-batch, C, H, W]`, outside autodiff.
    pub tensor: Tensor<4>,
}

/// A block's output during the forward pass, as [`Hooks::on_activation`] sees it.
#[derive(Clone, Debug)]
pub struct Activation {
    /// Position of the block in the worker's network (in a pipeline, in the stage's blocks).
    pub block: usize,
    /// The block's name (`layer2.1`, `head`).
    pub name: String,
    /// The output values, `[batch, C, H, W]`, outside autodiff.
    pub values: Tensor<4>,
    /// Values that replace `values` in the forward pass; elements that differ from `values`
    /// are used as constants (no gradient flows through them, as with an in-place write),
    /// the others keep their gradient.
    pub replacement: Option<Tensor<4>>,
}

/// Callbacks at the fixed points of a step. Every method defaults to [`Control::Continue`].
pub trait Hooks {
    /// Whether the trainer should keep a copy of the state before each step, so that
    /// [`Control::Redo`] can undo it. The copy shares tensor storage and costs little, but it
    /// stops in-place updates.
    fn undo(&self) -> bool {
        false
    }
    /// Before a worker's (or stage's) forward pass, with the worker.
    fn before_step(&mut self, _ctx: &Ctx, _worker: &mut Worker) -> Control {
        Control::Continue
    }
    /// After the worker's forward and backward passes, before its [`Hooks::after_loss`] and
    /// [`Hooks::after_backward`] (in a pipeline: after every micro-batch's passes and losses,
    /// for every stage before any stage's [`Hooks::after_backward`]), with the worker: its
    /// gradients are computed, so a change to its weights here reaches no gradient of the step
    /// (a fault in the weights' half-precision copy puts the master weights back here). Called
    /// for every worker whose passes ran to their end, whatever they returned.
    fn after_pass(&mut self, _ctx: &Ctx, _worker: &mut Worker) {}
    /// After a shard's loss is known.
    fn after_loss(&mut self, _ctx: &Ctx, _loss: &mut LossInfo) -> Control {
        Control::Continue
    }
    /// After the local backward pass, with the worker's (or stage's) gradients by name.
    fn after_backward(&mut self, _ctx: &Ctx, _grads: &mut Grads) -> Control {
        Control::Continue
    }
    /// After the all-reduce, with the copy of the averaged gradients this replica will apply.
    fn after_allreduce(&mut self, _ctx: &Ctx, _grads: &mut Grads) -> Control {
        Control::Continue
    }
    /// After a worker's optimizer step, with the updated worker.
    fn after_optimizer_step(&mut self, _ctx: &Ctx, _worker: &mut Worker) -> Control {
        Control::Continue
    }
    /// On a message between pipeline stages, before the receiver uses it.
    fn on_message(&mut self, _ctx: &Ctx, _msg: &mut Message) -> Control {
        Control::Continue
    }
    /// Whether the forward pass described by `ctx` (point [`Point::Forward`]) should call
    /// [`Hooks::on_activation`] after each block. Asked once per forward pass, so a forward
    /// nobody watches runs at full speed.
    fn watch_forward(&self, _ctx: &Ctx) -> bool {
        false
    }
    /// Whether, when some data-parallel workers are out of a step from its start (crashed
    /// earlier, not yet back), the others take over their samples (the global batch is kept)
    /// rather than leaving them out.
    fn rebalance(&self) -> bool {
        false
    }
    /// Asked once per computing worker of a data-parallel step (and per stage of a pipeline
    /// step, with an empty timeline) after its work is laid out on the simulated clock: the
    /// time in seconds from the step's start at which the worker crashes in this step, if it
    /// does. A pipeline stage crashes before its work.
    fn crash_time(&mut self, _ctx: &Ctx, _timeline: &Timeline) -> Option<f64> {
        None
    }
    /// A worker crashed inside the step (point [`Point::Crash`]). [`Control::Continue`] and
    /// [`Control::Skip`]: the survivors finish the step without it: the buckets already
    /// reduced keep its gradient, the bucket in flight and the later ones are reduced over the
    /// survivors, who apply them (lossy forward). [`Control::Redo`] undoes the step and runs it
    /// again (without the worker, which [`Hooks::before_step`] then leaves out);
    /// [`Control::Stop`] ends it.
    fn on_crash(&mut self, _ctx: &Ctx, _crash: &Crash) -> Control {
        Control::Continue
    }
    /// After a block's output is computed in a watched forward pass; set
    /// [`Activation::replacement`] to change what the next block sees. [`Control::Skip`]
    /// leaves the worker's contribution (or, in a pipeline, the micro-batch) out.
    fn on_activation(&mut self, _ctx: &Ctx, _act: &mut Activation) -> Control {
        Control::Continue
    }
}

/// Hooks that do nothing (plain training).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {}
