//! The fused gradient average (resilab's kernels on the flex device) against the tensor
//! formulation of the all-reduce: the same bits for DDP and Horovod, ring and rank order, any
//! worker count; and the same for the sum of a pipeline stage's micro-batch gradients.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use burn::prelude::*;
use resilab_train::{AllReduceKind, Grads, ParallelConfig, ReducePlan, SyncKind, sum_grads};

/// Worker `r`'s gradients: values whose sum depends on the order, and an infinity and a NaN.
fn grads(params: &[(String, usize)], r: usize, device: &Device) -> Grads {
    params
        .iter()
        .enumerate()
        .map(|(s, (name, n))| {
            let v: Vec<f32> =
                (0..*n).map(|i| [1e8, 1.0, -1e8, 0.3, 3e38, -2.5, f32::INFINITY, f32::NAN][(i * 7 + r * 3 + s) % 8]).collect();
            (name.clone(), Tensor::from_data(TensorData::new(v, [*n]), device))
        })
        .collect()
}

fn bits(g: &Grads) -> Vec<(String, Vec<u32>)> {
    g.iter().map(|(k, t)| (k.clone(), t.to_data().try_to_vec::<f32>().unwrap().into_iter().map(f32::to_bits).collect())).collect()
}

/// The path `fused` names.
fn kernels(fused: bool) -> resilab_models::Kernels {
    if fused { resilab_models::Kernels::Resilab } else { resilab_models::Kernels::Burn }
}

#[test]
fn the_fused_average_computes_the_tensor_formulas_bits() {
    let device = Device::flex();
    // Several buckets of the default 64 KiB (the 300,000-value parameter closes one), odd
    // lengths that cut the ring chunks anywhere.
    let params: Vec<(String, usize)> =
        [("a", 7usize), ("b", 300_000), ("c", 1), ("d", 40_003), ("e", 5)].iter().map(|(n, k)| (n.to_string(), *k)).collect();
    for workers in [2usize, 3, 8] {
        for sync in [SyncKind::Ddp, SyncKind::Horovod] {
            for allreduce in [AllReduceKind::Ring, AllReduceKind::RankOrder] {
                let cfg = ParallelConfig { workers, sync, allreduce, ..ParallelConfig::default() };
                let run = |fused: bool| {
                    let plan = ReducePlan::new(&params, &cfg, kernels(fused));
                    let contributions = (0..workers).map(|r| grads(&params, r, &device)).collect();
                    bits(&plan.reduce(contributions))
                };
                let (tensor, fused) = (run(false), run(true));
                assert_eq!(tensor.len(), params.len());
                assert_eq!(fused, tensor, "{workers} workers, {sync:?}, {allreduce:?}");
            }
        }
    }
    // A contribution that lacks a parameter leaves it out of the result on both paths.
    let cfg = ParallelConfig { workers: 2, ..ParallelConfig::default() };
    let run = |fused: bool| {
        let plan = ReducePlan::new(&params, &cfg, kernels(fused));
        let mut second = grads(&params, 1, &device);
        second.remove("d");
        bits(&plan.reduce(vec![grads(&params, 0, &device), second]))
    };
    let (tensor, fused) = (run(false), run(true));
    assert_eq!(fused, tensor);
    assert!(fused.iter().all(|(name, _)| name != "d"));

    // Micro-batch accumulation: left to right, on both paths, also when one part lacks a
    // parameter (then the others' sum is kept).
    for parts in [2usize, 3, 8] {
        for lacking in [false, true] {
            let run = |fused: bool| {
                let mut all: Vec<Grads> = (0..parts).map(|m| grads(&params, m, &device)).collect();
                if lacking {
                    all[1].remove("b");
                }
                bits(&sum_grads(all, kernels(fused)))
            };
            let (tensor, fused) = (run(false), run(true));
            assert_eq!(tensor.len(), params.len());
            assert_eq!(fused, tensor, "{parts} micro-batches, one lacking a parameter: {lacking}");
        }
    }
}
