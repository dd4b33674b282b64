//! Training for resilab.
//!
//! A [`Worker`] owns everything one training process owns: its model replica, its optimizer
//! state by parameter name ([`OptimState`]), its random stream and its data cursor. A
//! [`Trainer`] drives a set of workers through synchronous data-parallel steps; a
//! single-process run is the one-worker case. Optimizer state is resilab's own (not Burn's
//! optimizer records, whose keys change when a model is rebuilt), so faults, checkpoints and
//! replica copies address it by name.

mod allreduce;
mod fused;
mod grads;
mod hooks;
mod optim;
mod order;
mod parallel;
mod pass;
mod pipeline;
mod scaler;
mod schedule;
mod state;
mod timeline;
mod trainer;
mod update;
mod worker;

pub use allreduce::{REDUCE_PLAN_REVISION, ReducePlan, broadcast_s, chunk, gradient_ready_sizes, ring_allreduce_s, sum_grads};
pub use grads::{Grads, named_grads};
pub use hooks::{Activation, Control, Crash, Ctx, Hooks, LossInfo, Message, MessageKind, NoHooks, Point};
pub use optim::{OptimState, OptimizerConfig, OptimizerKind, ParamState};
pub use order::{OrderDraw, ReductionOrder};
pub use parallel::{
    AllReduceKind, Balance, BatchRule, Broadcast, ComputeConfig, DEFAULT_BUCKET_MB, NetworkConfig, ParallelConfig, ParallelMode,
    PipeSchedule, SyncKind,
};
pub use pass::forward_watched;
pub use pipeline::{Op, PipeTimes, balanced_cuts, makespan, peak_in_flight, stage_ops, stage_ranges};
pub use scaler::{LossScaleConfig, LossScaler, ScalerState, unscale};
pub use schedule::{ScheduleConfig, ScheduleKind};
pub use state::{HostParamState, HostTensor, RngState, TrainState, WorkerState};
pub use timeline::{BucketTimes, Phase, StepCosts, Timeline};
pub use trainer::{Attempts, MAX_REDOS, StepModel, StepOutcome, StepStats, TrainConfig, TrainSpec, Trainer};
pub use update::{tensor_update, update};
pub use worker::{Cursor, Evaluation, LocalPass, Prediction, Worker, count_correct, evaluate, predict};

/// Errors from configuring or running training.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is invalid; the message names the key.
    #[error("{0}")]
    Config(String),
    /// A saved state does not fit the model or trainer; the message lists what differs.
    #[error("{0}")]
    State(String),
    /// The model could not be built.
    #[error(transparent)]
    Model(#[from] resilab_models::Error),
    /// A batch does not fit the memory budget.
    #[error(transparent)]
    Budget(#[from] resilab_data::limits::Error),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
