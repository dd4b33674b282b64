//! The simulation's own per-step work for N data-parallel workers, one pass each (resilab's
//! kernels on, the `native` backend) against the tensor formulation (kernels off, as on
//! `flex`), measured in one run: the all-reduce of N workers' gradients and N optimizer
//! updates (SGD with momentum and weight decay), for VGG-11/4's and AlexNet/2's parameters.
//!
//! `bash bench/sim_costs.sh` (or `cargo run --release -p resilab-train --features avx512
//! --example sim_costs [-- NEW.csv]`) prints a table and, given a path that does not exist yet,
//! writes it as CSV. Both paths compute the same bits (tests/fused.rs, tests/fused_reduce.rs);
//! only the time differs.

use std::time::Instant;

use burn::prelude::*;
use burn::tensor::Distribution;
use resilab_models::{Arch, InputShape, ModelConfig, Net, for_each_param};
use resilab_train::{Grads, OptimState, OptimizerConfig, ParallelConfig, ReducePlan, gradient_ready_sizes};

const WORKERS: usize = 8;
const ROUNDS: usize = 10;

fn random_grads(net: &Net, device: &Device) -> Grads {
    let mut g = Grads::new();
    for_each_param(net, |info, t| {
        if info.trainable {
            g.insert(info.name.clone(), Tensor::random([t.dims()[0]], Distribution::Normal(0.0, 1.0), device));
        }
    });
    g
}

/// Median milliseconds of (all-reduce, N optimizer updates) per step.
fn measure(net: &Net, device: &Device, fused: bool) -> (f64, f64) {
    let kernels = if fused { resilab_models::Kernels::Resilab } else { resilab_models::Kernels::Burn };
    let plan = ReducePlan::new(&gradient_ready_sizes(net), &ParallelConfig { workers: WORKERS, ..ParallelConfig::default() }, kernels);
    let cfg = OptimizerConfig { weight_decay: 5e-4, ..OptimizerConfig::default() };
    let mut nets: Vec<Net> = (0..WORKERS).map(|_| net.clone().with_kernels(kernels)).collect();
    let mut states: Vec<OptimState> = (0..WORKERS).map(|_| OptimState::default()).collect();
    let (mut reduce_ms, mut update_ms) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let contributions: Vec<Grads> = (0..WORKERS).map(|_| random_grads(net, device)).collect();
        let t = Instant::now();
        let reduced = plan.reduce(contributions);
        reduce_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        for (n, s) in nets.iter_mut().zip(&mut states) {
            let owned = n.take();
            *n = s.step(&cfg, 0.05, owned, &reduced);
        }
        update_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    (median(reduce_ms), median(update_ms))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::flex();
    let models = [
        ("vgg11-w0.25", ModelConfig { arch: Arch::Vgg, depth: Some(11), width: 0.25, batch_norm: Some(false) }),
        ("alexnet-w0.5", ModelConfig { arch: Arch::Alexnet, depth: None, width: 0.5, batch_norm: Some(false) }),
    ];
    let mut rows = vec![
        "model,params,workers,tensor_reduce_ms,fused_reduce_ms,reduce_speedup,tensor_update_ms,fused_update_ms,update_speedup".to_string(),
    ];
    println!("{:<14} {:>9} {:>21} {:>21}", "model", "params", "all-reduce ms (x)", "8 updates ms (x)");
    for (name, cfg) in models {
        let net = cfg.build(InputShape { channels: 3, size: 32 }, 10, &device)?;
        let params: usize = gradient_ready_sizes(&net).iter().map(|(_, n)| n).sum();
        // Alternate the two paths so that drift on a shared machine hits both.
        let (mut tensor, mut fused) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
        for _ in 0..3 {
            let t = measure(&net, &device, false);
            let f = measure(&net, &device, true);
            tensor.0.push(t.0);
            tensor.1.push(t.1);
            fused.0.push(f.0);
            fused.1.push(f.1);
        }
        let (tr, tu, fr, fu) = (median(tensor.0), median(tensor.1), median(fused.0), median(fused.1));
        println!("{name:<14} {params:>9} {tr:>8.2} -> {fr:>5.2} ({:.1}x) {tu:>8.2} -> {fu:>5.2} ({:.1}x)", tr / fr, tu / fu);
        rows.push(format!("{name},{params},{WORKERS},{tr:.3},{fr:.3},{:.2},{tu:.3},{fu:.3},{:.2}", tr / fr, tu / fu));
    }
    if let Some(path) = std::env::args().nth(1) {
        // A new file only: an existing one is refused, not overwritten.
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(|e| format!("{path}: {e}"))?;
        std::io::Write::write_all(&mut file, (rows.join("\n") + "\n").as_bytes())?;
        println!("wrote {path}");
    }
    Ok(())
}
