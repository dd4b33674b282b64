use std::sync::Arc;

use burn::prelude::*;
use resilab_data::{EpochOrder, Split, shard_range};
use resilab_models::Net;
use serde::{Deserialize, Serialize};

use crate::{Error, Evaluation, OptimizerConfig, Result, ScheduleConfig, Worker, average, evaluate};

fn default_epochs() -> usize {
    1
}
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Epochs to train (ignored when `steps` is set).
    #[serde(default = "default_epochs")]
    pub epochs: usize,
    /// Total optimizer steps; overrides `epochs`.
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
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            epochs: default_epochs(),
            steps: None,
            batch_size: default_batch(),
            eval_batch_size: default_eval_batch(),
            log_every: default_log_every(),
            eval_every: None,
            augment: false,
        }
    }
}

/// What one global step produced, averaged over the workers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StepStats {
    /// Global step number (1-based: the number of steps completed).
    pub step: u64,
    /// Epoch the batch belonged to (0-based).
    pub epoch: usize,
    /// Mean of the workers' shard losses.
    pub loss: f64,
    /// Training accuracy on the global batch.
    pub train_acc: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Whether this step completed an epoch.
    pub epoch_end: bool,
}

/// Drives workers through synchronous data-parallel training steps: every worker computes
/// gradients on its shard of the global batch, the gradients are averaged in rank order, and
/// every worker applies the average with its own optimizer state.
pub struct Trainer {
    /// The workers, in rank order.
    pub workers: Vec<Worker>,
    /// Steps completed.
    pub step: u64,
    /// Training-loop settings.
    pub config: TrainConfig,
    /// Optimizer settings.
    pub optimizer: OptimizerConfig,
    /// Learning-rate schedule.
    pub schedule: ScheduleConfig,
    /// Seed of the data order.
    pub seed: u64,
    /// The data.
    pub data: Arc<Split>,
    device: Device,
    order: EpochOrder,
}

impl Trainer {
    /// A trainer with `n_workers` identical replicas of `net` (deep copies: resilab's modules
    /// hold no shared state, so `clone()` copies).
    pub fn new(
        net: Net,
        n_workers: usize,
        config: TrainConfig,
        optimizer: OptimizerConfig,
        schedule: ScheduleConfig,
        seed: u64,
        data: Arc<Split>,
        device: Device,
    ) -> Result<Self> {
        optimizer.validate()?;
        schedule.validate()?;
        if n_workers == 0 {
            return Err(Error::Config("parallel.workers must be at least 1".into()));
        }
        if config.batch_size < n_workers || config.batch_size > data.train.len() {
            return Err(Error::Config(format!(
                "train.batch_size = {} must be between the number of workers ({n_workers}) and the training set size ({})",
                config.batch_size,
                data.train.len()
            )));
        }
        if config.log_every == 0 || config.eval_every == Some(0) || config.eval_batch_size == 0 {
            return Err(Error::Config("train.log_every, train.eval_every and train.eval_batch_size must be >= 1".into()));
        }
        if config.steps.is_none() && config.epochs == 0 {
            return Err(Error::Config("train.epochs must be >= 1 (or set train.steps)".into()));
        }
        let workers = (0..n_workers).map(|r| Worker::new(r, net.clone(), seed)).collect();
        let order = EpochOrder::new(seed, 0, data.train.len());
        Ok(Self { workers, step: 0, config, optimizer, schedule, seed, data, device, order })
    }

    /// Optimizer steps per epoch (full global batches; a last partial batch is dropped).
    pub fn steps_per_epoch(&self) -> u64 {
        (self.data.train.len() / self.config.batch_size) as u64
    }

    /// Steps of the whole run.
    pub fn total_steps(&self) -> u64 {
        self.config.steps.unwrap_or(self.config.epochs as u64 * self.steps_per_epoch())
    }

    /// Whether the run is complete.
    pub fn done(&self) -> bool {
        self.step >= self.total_steps()
    }

    /// The device training runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Learning rate of the next step.
    pub fn lr(&self) -> f64 {
        self.schedule.lr(self.optimizer.lr, self.step, self.steps_per_epoch(), self.total_steps())
    }

    /// Runs one global step.
    pub fn step(&mut self) -> StepStats {
        let batch = self.config.batch_size;
        let cursor = self.workers[0].cursor;
        if self.order.epoch != cursor.epoch {
            self.order = EpochOrder::new(self.seed, cursor.epoch, self.data.train.len());
        }
        let global = self.order.batch(cursor.batch, batch).to_vec();
        let n = self.workers.len();
        let lr = self.lr();
        let (mut loss, mut correct) = (0.0, 0);
        let mut all_grads = Vec::with_capacity(n);
        for w in &mut self.workers {
            let shard = &global[shard_range(batch, w.rank, n)];
            let pass = w.forward_backward(&self.data.train, &self.data.norm, shard, self.config.augment, &self.device);
            loss += pass.loss;
            correct += pass.correct;
            all_grads.push(pass.grads);
        }
        let grads = average(all_grads);
        let spe = self.steps_per_epoch() as usize;
        for w in &mut self.workers {
            let net = w.net.clone();
            w.net = w.optim.step(&self.optimizer, lr, net, &grads);
            w.cursor = w.cursor.advance(spe);
        }
        self.step += 1;
        StepStats {
            step: self.step,
            epoch: cursor.epoch,
            loss: loss / n as f64,
            train_acc: correct as f64 / batch as f64,
            lr,
            epoch_end: self.workers[0].cursor.epoch != cursor.epoch,
        }
    }

    /// Test-set evaluation of worker 0's replica.
    pub fn evaluate(&self) -> Evaluation {
        evaluate(&self.workers[0].net, &self.data.test, &self.data.norm, self.config.eval_batch_size, &self.device)
    }
}
