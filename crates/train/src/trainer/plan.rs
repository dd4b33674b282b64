//! The data-parallel layout, fixed when the trainer is built: the all-reduce buckets, their
//! sizes and when each is ready in the backward pass, and the modelled cost of their updates.

use resilab_models::{InputShape, Net};

use crate::allreduce::{ReducePlan, gradient_ready_sizes};
use crate::optim::OptimizerConfig;
use crate::parallel::ParallelConfig;

/// The data-parallel layout, fixed when the trainer is built and shared by every step.
pub(super) struct DataPlan {
    pub(super) plan: ReducePlan,
    /// Bytes of each bucket, in reduction order.
    pub(super) bucket_bytes: Vec<u64>,
    /// Bytes of the buffers (BatchNorm statistics) DDP broadcasts.
    pub(super) buffer_bytes: u64,
    /// Per bucket, the share of the backward pass done when its gradients are ready (see
    /// [`crate::Timeline`]).
    pub(super) ready_frac: Vec<f64>,
}

impl DataPlan {
    /// The layout of `net` under `parallel`, for images of shape `input`.
    pub(super) fn new(net: &Net, parallel: &ParallelConfig, input: InputShape) -> Self {
        let plan = ReducePlan::new(&gradient_ready_sizes(net), parallel, net.kernels);
        let buffer_bytes = resilab_models::named_params(net).iter().filter(|p| !p.trainable).map(|p| 4 * p.numel() as u64).sum();
        let ready_frac = ready_fractions(net, &plan, input);
        Self { bucket_bytes: plan.bucket_bytes(), plan, buffer_bytes, ready_frac }
    }
}

/// Per bucket of `plan`, the share of the backward pass done when its gradients are ready:
/// backward runs the blocks last to first, so a bucket is ready once backward has passed the
/// earliest block holding one of its parameters (block FLOPs measure the work).
fn ready_fractions(net: &Net, plan: &ReducePlan, input: InputShape) -> Vec<f64> {
    let costs = net.block_costs(input);
    let total: u64 = costs.iter().map(|c| c.flops).sum::<u64>().max(1);
    let block_of = |param: &str| {
        costs
            .iter()
            .enumerate()
            .filter(|(_, c)| param.starts_with(&format!("{}.", c.name)))
            .max_by_key(|(_, c)| c.name.len())
            .map_or(0, |(i, _)| i)
    };
    plan.buckets
        .iter()
        .map(|b| {
            let first = b.iter().map(|(name, _)| block_of(name)).min().unwrap_or(0);
            costs[first..].iter().map(|c| c.flops).sum::<u64>() as f64 / total as f64
        })
        .collect()
}

/// Optimizer buffers per parameter: momentum for SGD with momentum, two moments for Adam.
pub(crate) fn optimizer_buffers(optimizer: &OptimizerConfig) -> u64 {
    optimizer.buffer_names().len() as u64
}

/// Modelled seconds of each bucket's update: its parameters and optimizer state read and
/// written once and its gradients read, at the memory bandwidth.
pub(crate) fn modelled_bucket_updates(parallel: &ParallelConfig, optimizer: &OptimizerConfig, bucket_bytes: &[u64]) -> Vec<f64> {
    let buffers = optimizer_buffers(optimizer);
    bucket_bytes.iter().map(|&b| parallel.compute.copy_s(b * (2 * (1 + buffers) + 1))).collect()
}
