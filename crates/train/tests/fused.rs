//! The fused optimizer update (resilab's kernels on the flex device) against the tensor
//! formulation: the same bits for parameters and state, step after step, for every SGD and
//! Adam setting; shared tensors left as they were.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use burn::prelude::*;
use resilab_models::Kernels;
use resilab_train::{OptimizerConfig, OptimizerKind, ParamState, tensor_update, update};

fn bits(t: &Tensor<1>) -> Vec<u32> {
    t.to_data().try_to_vec::<f32>().unwrap().into_iter().map(f32::to_bits).collect()
}

fn state_bits(s: &ParamState) -> Vec<(String, Vec<u32>)> {
    s.buffers.iter().map(|(k, v)| (k.clone(), bits(v))).collect()
}

/// Values with the awkward ones among them: NaN, infinities, -0, subnormal, huge.
fn values(n: usize, seed: u32) -> Vec<f32> {
    let special = [f32::NAN, f32::INFINITY, -0.0, 1e-40, -3e38, f32::NEG_INFINITY];
    (0..n)
        .map(|i| match i % 97 {
            k @ 0..=5 if seed.is_multiple_of(2) => special[k],
            _ => ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 4001) as f32 / 1000.0 - 2.0,
        })
        .collect()
}

fn tensor(v: Vec<f32>, device: &Device) -> Tensor<1> {
    let n = v.len();
    Tensor::from_data(TensorData::new(v, [n]), device)
}

fn configs() -> Vec<OptimizerConfig> {
    let base = OptimizerConfig::default();
    let sgd = OptimizerConfig { kind: OptimizerKind::Sgd, ..base.clone() };
    let adam = OptimizerConfig { kind: OptimizerKind::Adam, lr: 1e-3, ..base };
    vec![
        OptimizerConfig { momentum: 0.0, ..sgd.clone() },
        OptimizerConfig { momentum: 0.0, weight_decay: 1e-3, ..sgd.clone() },
        OptimizerConfig { momentum: 0.9, weight_decay: 5e-4, ..sgd.clone() },
        OptimizerConfig { momentum: 0.8, dampening: 0.3, ..sgd.clone() },
        OptimizerConfig { momentum: 0.9, nesterov: true, weight_decay: 1e-4, ..sgd },
        adam.clone(),
        OptimizerConfig { weight_decay: 1e-2, beta1: 0.8, beta2: 0.99, eps: 1e-6, ..adam },
    ]
}

#[test]
fn the_fused_update_computes_the_tensor_formulas_bits() {
    let device = Device::flex();
    // Longer than one kernel run (16384 values), so several threads share a parameter.
    let n = 40_007;
    for cfg in configs() {
        for seed in [1u32, 2] {
            let (mut fused, mut reference) = (tensor(values(n, seed), &device), tensor(values(n, seed), &device));
            let (mut fs, mut rs) = (ParamState::default(), ParamState::default());
            for step in 0..4u32 {
                let g = values(n, seed + 10 * step + 3);
                let lr = cfg.lr * f64::from(step + 1);
                fused = update(&cfg, lr, fused, tensor(g.clone(), &device), &mut fs, Kernels::Resilab);
                reference = tensor_update(&cfg, lr, reference, tensor(g, &device), &mut rs);
                assert_eq!(bits(&fused), bits(&reference), "{cfg:?} seed {seed} step {step}");
                assert_eq!(state_bits(&fs), state_bits(&rs), "{cfg:?} seed {seed} step {step}");
                assert_eq!(fs.step, rs.step);
            }
        }
    }
}

#[test]
fn tensors_held_elsewhere_keep_their_values() {
    let device = Device::flex();
    let cfg = OptimizerConfig { momentum: 0.9, ..OptimizerConfig::default() };
    let (param, grad) = (tensor(values(1000, 1), &device), tensor(values(1000, 3), &device));
    let mut state = ParamState::default();
    let snapshot = param.clone();
    let before = bits(&snapshot);
    let param = update(&cfg, 0.1, param, grad.clone(), &mut state, Kernels::Resilab);
    assert_eq!(bits(&snapshot), before, "a clone of the parameter changed with it");
    assert_ne!(bits(&param), before);
    // A copy of the state (a rollback snapshot) keeps the buffer's old values.
    let saved = state.clone();
    let saved_bits = state_bits(&saved);
    update(&cfg, 0.1, param, grad, &mut state, Kernels::Resilab);
    assert_eq!(state_bits(&saved), saved_bits);
    assert_ne!(state_bits(&state), saved_bits);
}

#[test]
fn unusual_states_take_the_tensor_formulas_path() {
    let device = Device::flex();
    let (p, g) = (values(300, 1), values(300, 5));
    // A momentum buffer kept while momentum is 0 stays as it is; Adam with one moment only
    // starts the missing one from the gradient.
    let cases = [
        (OptimizerConfig { momentum: 0.0, ..OptimizerConfig::default() }, "momentum_buffer"),
        (OptimizerConfig { kind: OptimizerKind::Adam, ..OptimizerConfig::default() }, "exp_avg"),
    ];
    for (cfg, buffer) in cases {
        let start = ParamState { step: 3, buffers: [(buffer.to_string(), tensor(values(300, 7), &device))].into() };
        let (mut fs, mut rs) = (start.clone(), start);
        let fused = update(&cfg, 0.1, tensor(p.clone(), &device), tensor(g.clone(), &device), &mut fs, Kernels::Resilab);
        let reference = tensor_update(&cfg, 0.1, tensor(p.clone(), &device), tensor(g.clone(), &device), &mut rs);
        assert_eq!(bits(&fused), bits(&reference), "{cfg:?}");
        assert_eq!(state_bits(&fs), state_bits(&rs), "{cfg:?}");
    }
}

#[test]
fn state_and_gradients_made_on_an_autodiff_device_are_updated_as_data() {
    // A checkpoint restored onto the training device gives optimizer buffers tracked by
    // autodiff; the update treats them as plain values, on either path.
    let (plain, tracked) = (Device::flex(), Device::flex().autodiff());
    for cfg in configs() {
        let buffers = |d: &Device| match cfg.kind {
            OptimizerKind::Sgd => [("momentum_buffer".to_string(), tensor(values(500, 9), d))].into(),
            OptimizerKind::Adam => {
                [("exp_avg".to_string(), tensor(values(500, 9), d)), ("exp_avg_sq".to_string(), tensor(values(500, 11), d))].into()
            }
        };
        let mut fs = ParamState { step: 2, buffers: buffers(&tracked) };
        let mut rs = ParamState { step: 2, buffers: buffers(&plain) };
        let fused = update(&cfg, 0.1, tensor(values(500, 1), &plain), tensor(values(500, 5), &tracked), &mut fs, Kernels::Resilab);
        let reference = tensor_update(&cfg, 0.1, tensor(values(500, 1), &plain), tensor(values(500, 5), &plain), &mut rs);
        assert_eq!(bits(&fused), bits(&reference), "{cfg:?}");
        assert_eq!(state_bits(&fs), state_bits(&rs), "{cfg:?}");
    }
}
