//! The `[parallel]` section: data-parallel replicas or pipeline stages, how gradients are
//! reduced, and the network that the cost model charges for communication.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// How the work of one global step is divided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ParallelMode {
    /// Data parallel: `workers` replicas, each with its own model and optimizer state and a
    /// shard of every global batch.
    #[default]
    Data,
    /// Pipeline parallel: the model cut into `stages` at block boundaries, each global batch cut
    /// into `micro_batches`.
    Pipeline,
}

/// Which framework's synchronisation a data-parallel run mimics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SyncKind {
    /// PyTorch DDP: rank 0's buffers (BatchNorm running statistics) are broadcast to every
    /// replica before each forward; gradients are divided by the world size before a bucketed
    /// all-reduce (the `Reducer`'s buckets of `bucket_mb`, the first of `first_bucket_mb`, in
    /// the order gradients become ready).
    #[default]
    Ddp,
    /// Horovod: buffers are never synchronised after the start; gradients are fused, in the
    /// order they become ready, into buffers of at most `bucket_mb`, summed, then multiplied by
    /// 1/N.
    Horovod,
}

/// The summation order of the all-reduce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AllReduceKind {
    /// Ring all-reduce as NCCL and Horovod run it: each bucket is cut into one chunk per
    /// worker and chunk `c` is summed along the ring starting at rank `c + 1`, so the order of
    /// the additions differs from chunk to chunk.
    #[default]
    Ring,
    /// Every element summed in rank order, `((g0 + g1) + g2) + ...`.
    RankOrder,
}

/// Pipeline schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PipeSchedule {
    /// GPipe: every stage runs the forwards of all micro-batches, then all backwards.
    #[default]
    Gpipe,
    /// One forward, one backward: after a warm-up of `S - s - 1` forwards, stage `s`
    /// alternates, which bounds the activations it holds to `S - s` micro-batches.
    #[serde(rename = "1f1b")]
    OneFOneB,
}

/// How pipeline stages are balanced when `split_at` is not given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Balance {
    /// Minimise the largest stage's forward FLOPs.
    #[default]
    Flops,
    /// Minimise the largest stage's trainable parameter count.
    Params,
}

/// How a data-parallel job sizes its batch after losing workers for good and going on with
/// the others (`[recovery] shrink_batch`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchRule {
    /// The global batch stays `train.batch_size`; each worker left takes a larger share, and
    /// the learning rate is unchanged.
    #[default]
    KeepGlobal,
    /// Each worker keeps its batch (`train.batch_size / parallel.workers`), so the global batch
    /// shrinks with the workers, and the learning rate is scaled by the same factor (the linear
    /// scaling rule of Goyal et al., 2017).
    KeepPerWorker,
}

impl BatchRule {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            BatchRule::KeepGlobal => "keep_global",
            BatchRule::KeepPerWorker => "keep_per_worker",
        }
    }
}

/// The all-reduce bucket size when `parallel.bucket_mb` is not given: 64 KiB.
pub const DEFAULT_BUCKET_MB: f64 = 0.0625;

fn mib_to_bytes(mb: f64) -> u64 {
    (mb * 1024.0 * 1024.0) as u64
}

fn one() -> usize {
    1
}
fn default_latency() -> f64 {
    5.0
}
fn default_bandwidth() -> f64 {
    100.0
}

/// The interconnect the cost model assumes (alpha-beta: a message of `b` bytes takes
/// `latency + b / bandwidth`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// Per-message latency (alpha) in microseconds.
    #[serde(default = "default_latency")]
    pub latency_us: f64,
    /// Link bandwidth (1/beta) in gigabits per second.
    #[serde(default = "default_bandwidth")]
    pub bandwidth_gbps: f64,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self { latency_us: default_latency(), bandwidth_gbps: default_bandwidth() }
    }
}

impl NetworkConfig {
    /// Seconds to send `bytes` in one message.
    pub fn send_s(&self, bytes: u64) -> f64 {
        self.latency_us * 1e-6 + bytes as f64 * 8.0 / (self.bandwidth_gbps * 1e9)
    }
}

fn default_memory() -> f64 {
    20.0
}

/// The workers' side of the cost model (`[parallel.compute]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComputeConfig {
    /// Modelled rate of one worker in GFLOP/s. When set, each forward pass costs its FLOPs
    /// (from the layer shapes) at this rate, a backward pass twice that, and an optimizer
    /// update the bytes of its state moved at `memory_gbps`: simulated time is then
    /// deterministic (the same on every machine and run). Unset: passes and updates cost their
    /// measured time.
    #[serde(default)]
    pub gflops: Option<f64>,
    /// Memory bandwidth of one worker in GB/s (default 20), for what the cost model charges as
    /// copies: rollback's copy of model and optimizer state before every step (a real framework
    /// updates in place, so it must copy), its restore on a redo, and modelled updates.
    #[serde(default = "default_memory")]
    pub memory_gbps: f64,
    /// Storage bandwidth in GB/s (default 2), for the checkpoint writes and the reloads of a
    /// restart: the state's bytes at this rate.
    #[serde(default = "default_storage")]
    pub storage_gbps: f64,
}

fn default_storage() -> f64 {
    2.0
}

impl Default for ComputeConfig {
    fn default() -> Self {
        Self { gflops: None, memory_gbps: default_memory(), storage_gbps: default_storage() }
    }
}

impl ComputeConfig {
    /// Seconds to copy `bytes` at `memory_gbps`.
    pub fn copy_s(&self, bytes: u64) -> f64 {
        bytes as f64 / (self.memory_gbps * 1e9)
    }

    /// Seconds to write or read `bytes` of checkpoint at `storage_gbps`.
    pub fn storage_s(&self, bytes: u64) -> f64 {
        bytes as f64 / (self.storage_gbps * 1e9)
    }

    /// Modelled seconds of `flops`, if a rate is set.
    pub fn flops_s(&self, flops: f64) -> Option<f64> {
        self.gflops.map(|g| flops / (g * 1e9))
    }
}

/// What rank 0 broadcasts to the other data-parallel replicas when training restarts from a
/// checkpoint (each replica first loads its own file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Broadcast {
    /// Nothing: every replica keeps what its own file held.
    Nothing,
    /// Rank 0's parameters and buffers (PyTorch DDP does this when it wraps the model).
    Parameters,
    /// Rank 0's parameters, buffers and optimizer state (what Horovod scripts usually do after
    /// loading: `broadcast_parameters` and `broadcast_optimizer_state`).
    ParametersAndOptimizer,
}

/// The `[parallel]` section of a run configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParallelConfig {
    /// `data` (default) or `pipeline`.
    #[serde(default)]
    pub mode: ParallelMode,
    /// Data-parallel replicas (mode `data`).
    #[serde(default = "one")]
    pub workers: usize,
    /// `ddp` (default) or `horovod` (mode `data`).
    #[serde(default)]
    pub sync: SyncKind,
    /// `ring` (default) or `rank_order` (mode `data`).
    #[serde(default)]
    pub allreduce: AllReduceKind,
    /// All-reduce bucket (DDP's `bucket_cap_mb`) or fusion buffer (Horovod) size in MiB;
    /// default [`DEFAULT_BUCKET_MB`] (64 KiB), scaled to resilab's small models as DDP's 25 MiB
    /// is to large ones, so that the all-reduces overlap the backward pass (see
    /// [`crate::Timeline`]). PyTorch's own defaults are 25 (DDP) and 64 (Horovod).
    #[serde(default)]
    pub bucket_mb: Option<f64>,
    /// DDP's first bucket in MiB (`dist._DEFAULT_FIRST_BUCKET_BYTES`); unset: `bucket_mb`, as
    /// DDP does when `bucket_cap_mb` is given. DDP without `bucket_cap_mb` is `bucket_mb = 25`
    /// with `first_bucket_mb = 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_bucket_mb: Option<f64>,
    /// Pipeline stages (mode `pipeline`).
    #[serde(default = "one")]
    pub stages: usize,
    /// Micro-batches per global batch (mode `pipeline`).
    #[serde(default = "one")]
    pub micro_batches: usize,
    /// `gpipe` (default) or `1f1b`.
    #[serde(default)]
    pub schedule: PipeSchedule,
    /// `flops` (default) or `params`: what stage balancing equalises.
    #[serde(default)]
    pub balance: Balance,
    /// Explicit stage boundaries: the index of the first block of stages 1, 2, ... (`S - 1`
    /// increasing block indices); overrides `balance`.
    #[serde(default)]
    pub split_at: Option<Vec<usize>>,
    /// Interconnect of the cost model.
    #[serde(default)]
    pub network: NetworkConfig,
    /// Workers of the cost model.
    #[serde(default)]
    pub compute: ComputeConfig,
    /// What is broadcast from rank 0 at a restart from a checkpoint (mode `data`); default by
    /// `sync`: `parameters` for DDP, `parameters_and_optimizer` for Horovod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast_on_restart: Option<Broadcast>,
    /// Spare nodes that can take the place of workers lost for good (`[[fault]]` crashes with
    /// `permanent = true`; see `recovery.on_permanent_loss`). Unset: as many as needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spares: Option<usize>,
}

impl Default for ParallelConfig {
    fn default() -> Self {
        Self {
            mode: ParallelMode::Data,
            workers: 1,
            sync: SyncKind::Ddp,
            allreduce: AllReduceKind::Ring,
            bucket_mb: None,
            first_bucket_mb: None,
            stages: 1,
            micro_batches: 1,
            schedule: PipeSchedule::Gpipe,
            balance: Balance::Flops,
            split_at: None,
            network: NetworkConfig::default(),
            compute: ComputeConfig::default(),
            broadcast_on_restart: None,
            spares: None,
        }
    }
}

impl ParallelConfig {
    /// What is broadcast at a restart: `broadcast_on_restart`, or the default of `sync`.
    pub fn broadcast(&self) -> Broadcast {
        self.broadcast_on_restart.unwrap_or(match self.sync {
            SyncKind::Ddp => Broadcast::Parameters,
            SyncKind::Horovod => Broadcast::ParametersAndOptimizer,
        })
    }

    /// Number of workers (data parallel) or stages (pipeline).
    pub fn world(&self) -> usize {
        match self.mode {
            ParallelMode::Data => self.workers,
            ParallelMode::Pipeline => self.stages,
        }
    }

    /// Bucket size in bytes ([`DEFAULT_BUCKET_MB`] unless set).
    pub fn bucket_bytes(&self) -> u64 {
        mib_to_bytes(self.bucket_mb.unwrap_or(DEFAULT_BUCKET_MB))
    }

    /// The first bucket's size in bytes: `first_bucket_mb` under DDP where set, else
    /// [`ParallelConfig::bucket_bytes`].
    pub fn first_bucket_bytes(&self) -> u64 {
        match (self.sync, self.first_bucket_mb) {
            (SyncKind::Ddp, Some(mb)) => mib_to_bytes(mb),
            _ => self.bucket_bytes(),
        }
    }

    /// A short description such as `data x4 (ddp, ring)` or `pipeline 4 stages x 8 micro-batches (gpipe)`.
    pub fn describe(&self) -> String {
        match self.mode {
            ParallelMode::Data if self.workers == 1 => "single worker".to_string(),
            ParallelMode::Data => format!(
                "data x{} ({}, {})",
                self.workers,
                match self.sync {
                    SyncKind::Ddp => "ddp",
                    SyncKind::Horovod => "horovod",
                },
                match self.allreduce {
                    AllReduceKind::Ring => "ring",
                    AllReduceKind::RankOrder => "rank_order",
                }
            ),
            ParallelMode::Pipeline => format!(
                "pipeline {} stages x {} micro-batches ({})",
                self.stages,
                self.micro_batches,
                match self.schedule {
                    PipeSchedule::Gpipe => "gpipe",
                    PipeSchedule::OneFOneB => "1f1b",
                }
            ),
        }
    }

    /// Checks the section against the global batch size; messages name the key.
    pub fn validate(&self, batch_size: usize) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        let n = &self.network;
        if !(n.latency_us.is_finite() && n.latency_us >= 0.0) {
            return bad(format!("parallel.network.latency_us = {} must be >= 0", n.latency_us));
        }
        if !(n.bandwidth_gbps.is_finite() && n.bandwidth_gbps > 0.0) {
            return bad(format!("parallel.network.bandwidth_gbps = {} must be > 0", n.bandwidth_gbps));
        }
        if let Some(mb) = self.bucket_mb
            && !(mb.is_finite() && mb > 0.0)
        {
            return bad(format!("parallel.bucket_mb = {mb} must be > 0"));
        }
        if let Some(mb) = self.first_bucket_mb {
            if !(mb.is_finite() && mb > 0.0) {
                return bad(format!("parallel.first_bucket_mb = {mb} must be > 0"));
            }
            if self.sync != SyncKind::Ddp {
                return bad("parallel.first_bucket_mb is DDP's first bucket: it needs sync = \"ddp\"".to_string());
            }
        }
        let c = &self.compute;
        if !(c.memory_gbps.is_finite() && c.memory_gbps > 0.0) {
            return bad(format!("parallel.compute.memory_gbps = {} must be > 0", c.memory_gbps));
        }
        if !(c.storage_gbps.is_finite() && c.storage_gbps > 0.0) {
            return bad(format!("parallel.compute.storage_gbps = {} must be > 0", c.storage_gbps));
        }
        if let Some(g) = c.gflops
            && !(g.is_finite() && g > 0.0)
        {
            return bad(format!("parallel.compute.gflops = {g} must be > 0"));
        }
        match self.mode {
            ParallelMode::Data => {
                if self.stages != 1 || self.micro_batches != 1 || self.split_at.is_some() {
                    return bad("parallel.stages, parallel.micro_batches and parallel.split_at apply to mode = \"pipeline\"".into());
                }
                if self.workers == 0 {
                    return bad("parallel.workers must be at least 1".into());
                }
                if !batch_size.is_multiple_of(self.workers) {
                    return bad(format!(
                        "train.batch_size = {batch_size} must be a multiple of parallel.workers = {} (every replica gets an equal shard)",
                        self.workers
                    ));
                }
            }
            ParallelMode::Pipeline => {
                if self.workers != 1 {
                    return bad("parallel.workers applies to mode = \"data\"; a pipeline has parallel.stages".into());
                }
                if self.stages == 0 || self.micro_batches == 0 {
                    return bad("parallel.stages and parallel.micro_batches must be at least 1".into());
                }
                if !batch_size.is_multiple_of(self.micro_batches) {
                    return bad(format!(
                        "train.batch_size = {batch_size} must be a multiple of parallel.micro_batches = {}",
                        self.micro_batches
                    ));
                }
                if let Some(s) = &self.split_at
                    && s.len() + 1 != self.stages
                {
                    return bad(format!("parallel.split_at has {} entries; {} stages need {}", s.len(), self.stages, self.stages - 1));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_key() {
        let mut p = ParallelConfig { workers: 3, ..ParallelConfig::default() };
        assert!(p.validate(64).unwrap_err().to_string().contains("parallel.workers = 3"));
        assert!(p.validate(63).is_ok());
        p.stages = 2;
        assert!(p.validate(63).unwrap_err().to_string().contains("parallel.stages"));
        let p = ParallelConfig {
            mode: ParallelMode::Pipeline,
            stages: 3,
            micro_batches: 4,
            split_at: Some(vec![2]),
            ..ParallelConfig::default()
        };
        assert!(p.validate(64).unwrap_err().to_string().contains("split_at has 1"));
        let p = ParallelConfig { mode: ParallelMode::Pipeline, stages: 3, micro_batches: 5, ..ParallelConfig::default() };
        assert!(p.validate(64).unwrap_err().to_string().contains("micro_batches = 5"));
        let p = ParallelConfig { first_bucket_mb: Some(0.0), ..ParallelConfig::default() };
        assert!(p.validate(64).unwrap_err().to_string().contains("parallel.first_bucket_mb = 0 must be > 0"));
        let p = ParallelConfig { first_bucket_mb: Some(1.0), sync: SyncKind::Horovod, ..ParallelConfig::default() };
        assert!(p.validate(64).unwrap_err().to_string().contains("parallel.first_bucket_mb is DDP's first bucket"));
    }

    #[test]
    fn send_time_is_alpha_plus_bytes_over_bandwidth() {
        let n = NetworkConfig { latency_us: 10.0, bandwidth_gbps: 8.0 };
        assert!((n.send_s(1_000_000) - (10e-6 + 1e-3)).abs() < 1e-12);
        assert_eq!(ParallelConfig::default().bucket_bytes(), 64 * 1024);
        assert_eq!(ParallelConfig::default().first_bucket_bytes(), 64 * 1024);
        let ddp = ParallelConfig { bucket_mb: Some(25.0), first_bucket_mb: Some(1.0), ..ParallelConfig::default() };
        assert_eq!((ddp.bucket_bytes(), ddp.first_bucket_bytes()), (25 << 20, 1 << 20));
    }
}
