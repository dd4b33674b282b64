//! resilab's named-state SGD-momentum and Adam against Burn's own optimizers.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, GradientsParams, SgdConfig};
use burn::prelude::*;
use burn::tensor::{Distribution, Int};
use resilab_models::{Arch, InputShape, Mode, ModelConfig, Net, for_each_param, init_parameters};
use resilab_train::{OptimState, OptimizerConfig, OptimizerKind, named_grads};

fn tiny_net(device: &Device) -> Net {
    let cfg = ModelConfig { arch: Arch::Resnet, depth: Some(8), width: 0.25, batch_norm: None };
    let net = cfg.build(InputShape { channels: 3, size: 16 }, 4, device).unwrap();
    init_parameters(net, 3, device)
}

fn loss(net: &mut Net, x: Tensor<4>, y: Tensor<1, Int>, device: &Device) -> Tensor<1> {
    let logits = net.forward(x, Mode::Train);
    CrossEntropyLossConfig::new().init(device).forward(logits, y)
}

fn values(net: &Net) -> Vec<(String, Vec<f32>)> {
    let mut out = Vec::new();
    for_each_param(net, |info, t| out.push((info.name.clone(), t.into_data().try_to_vec::<f32>().unwrap())));
    out
}

fn max_diff(a: &Net, b: &Net) -> f32 {
    values(a)
        .iter()
        .zip(values(b))
        .flat_map(|((na, va), (nb, vb))| {
            assert_eq!(na, &nb);
            va.iter().zip(vb).map(|(x, y)| (x - y).abs()).collect::<Vec<_>>()
        })
        .fold(0.0, f32::max)
}

/// Runs 5 steps with both optimizers on the same gradients (taken from Burn's trajectory) and
/// returns the largest parameter difference seen after any step.
fn compare(cfg: &OptimizerConfig, mut burn_optim: burn::optim::ModuleOptimizer) -> f32 {
    let device = Device::flex().autodiff();
    let mut a = tiny_net(&device);
    let mut b = a.clone();
    let mut ours = OptimState::default();
    let mut worst = 0.0f32;
    for step in 0..5 {
        let x = Tensor::<4>::random([8, 3, 16, 16], Distribution::Normal(0.0, 1.0), &device);
        let y = Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 1, 2, 3, 0, 1, 2, 3], [8]), &device);
        // The same forward twice gives the same gradients: one copy for each optimizer.
        let mut a_fwd = a.clone();
        let grads_burn = GradientsParams::from_grads(loss(&mut a_fwd, x.clone(), y.clone(), &device).backward(), &a_fwd);
        let mut a_fwd2 = a.clone();
        let grads_named = named_grads(&a_fwd2.clone(), loss(&mut a_fwd2, x, y, &device).backward());
        // Running statistics come from the forward pass; both nets take them from it.
        b = resilab_models::map_params(b, |info, _| if info.trainable { None } else { values_of(&a_fwd, &info.name) });
        a = burn_optim.step(cfg.lr, a_fwd, grads_burn);
        b = ours.step(cfg, cfg.lr, b, &grads_named);
        worst = worst.max(max_diff(&a, &b));
        assert!(ours.params.values().all(|p| p.step == step + 1));
    }
    worst
}

fn values_of(net: &Net, name: &str) -> Option<Tensor<1>> {
    let mut found = None;
    for_each_param(net, |info, t| {
        if info.name == name {
            found = Some(t);
        }
    });
    found
}

#[test]
fn sgd_momentum_matches_burn() {
    let cfg = OptimizerConfig { kind: OptimizerKind::Sgd, lr: 0.1, momentum: 0.9, weight_decay: 5e-4, ..Default::default() };
    let burn = SgdConfig::new()
        .with_momentum(Some(MomentumConfig { momentum: 0.9, dampening: 0.0, nesterov: false }))
        .with_weight_decay(Some(WeightDecayConfig { penalty: 5e-4 }))
        .init();
    let d = compare(&cfg, burn);
    assert!(d < 1e-6, "max difference {d}");
}

#[test]
fn nesterov_matches_burn() {
    let cfg = OptimizerConfig { kind: OptimizerKind::Sgd, lr: 0.05, momentum: 0.8, nesterov: true, ..Default::default() };
    let burn = SgdConfig::new().with_momentum(Some(MomentumConfig { momentum: 0.8, dampening: 0.0, nesterov: true })).init();
    let d = compare(&cfg, burn);
    assert!(d < 1e-6, "max difference {d}");
}

#[test]
fn adam_matches_burn() {
    let cfg = OptimizerConfig { kind: OptimizerKind::Adam, lr: 1e-3, weight_decay: 1e-4, ..Default::default() };
    let burn = AdamConfig::new()
        .with_beta_1(0.9)
        .with_beta_2(0.999)
        .with_epsilon(1e-8)
        .with_weight_decay(Some(WeightDecayConfig { penalty: 1e-4 }))
        .init();
    let d = compare(&cfg, burn);
    assert!(d < 1e-6, "max difference {d}");
}

#[test]
fn state_is_named_like_pytorch() {
    let device = Device::flex().autodiff();
    let mut net = tiny_net(&device);
    let x = Tensor::<4>::random([4, 3, 16, 16], Distribution::Normal(0.0, 1.0), &device);
    let y = Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 1, 2, 3], [4]), &device);
    let g = named_grads(&net.clone(), loss(&mut net, x, y, &device).backward());
    for (kind, buffers) in [(OptimizerKind::Sgd, vec!["momentum_buffer"]), (OptimizerKind::Adam, vec!["exp_avg", "exp_avg_sq"])] {
        let cfg = OptimizerConfig { kind, ..Default::default() };
        let mut st = OptimState::default();
        let _ = st.step(&cfg, 0.01, net.clone(), &g);
        let p = &st.params["layer1.0.conv1.weight"];
        assert_eq!(p.buffers.keys().map(String::as_str).collect::<Vec<_>>(), buffers);
        assert!(!st.params.contains_key("stem.bn.running_mean"));
    }
}
