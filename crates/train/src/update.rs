//! One optimizer step: the fused pass of the resilab kernels where it applies, the same
//! update as tensor operations elsewhere.

use burn::prelude::*;
use resilab_models::{Kernels, Net, update_params};

use crate::fused;
use crate::grads::Grads;
use crate::optim::{OptimState, OptimizerConfig, OptimizerKind, ParamState};

impl OptimState {
    /// Applies one update to every trainable parameter of `net` that has a gradient in `grads`,
    /// with learning rate `lr`.
    pub fn step(&mut self, cfg: &OptimizerConfig, lr: f64, net: Net, grads: &Grads) -> Net {
        let kernels = net.kernels;
        update_params(net, |info, param| {
            let grad = match grads.get(&info.name) {
                Some(g) if info.trainable => g.clone(),
                _ => return param,
            };
            let state = self.params.entry(info.name.clone()).or_default();
            update(cfg, lr, param, grad, state, kernels)
        })
    }
}

/// One update of one (flattened) parameter: PyTorch's `SGD` or `Adam` step.
///
/// With [`Kernels::Resilab`] (the `native` backend) and the tensors on the flex device, this
/// is one fused pass that computes the same bits ([`crate::fused`]).
pub fn update(cfg: &OptimizerConfig, lr: f64, param: Tensor<1>, grad: Tensor<1>, state: &mut ParamState, kernels: Kernels) -> Tensor<1> {
    if fused::applies(cfg, &param, &grad, state, kernels) {
        return fused::update(cfg, lr, param, grad, state);
    }
    tensor_update(cfg, lr, param, grad, state)
}

/// [`update`] as tensor operations, on any backend.
pub fn tensor_update(cfg: &OptimizerConfig, lr: f64, param: Tensor<1>, grad: Tensor<1>, state: &mut ParamState) -> Tensor<1> {
    let mut g = grad;
    if cfg.weight_decay != 0.0 {
        g = g + param.clone().mul_scalar(cfg.weight_decay);
    }
    state.step += 1;
    match cfg.kind {
        OptimizerKind::Sgd => {
            if cfg.momentum != 0.0 {
                let buf = match state.buffers.remove("momentum_buffer") {
                    Some(b) if cfg.dampening == 0.0 => b.mul_scalar(cfg.momentum) + g.clone(),
                    Some(b) => b.mul_scalar(cfg.momentum) + g.clone().mul_scalar(1.0 - cfg.dampening),
                    None => g.clone(),
                };
                g = if cfg.nesterov { g + buf.clone().mul_scalar(cfg.momentum) } else { buf.clone() };
                state.buffers.insert("momentum_buffer".into(), buf);
            }
            param - g.mul_scalar(lr)
        }
        OptimizerKind::Adam => {
            let (b1, b2) = (cfg.beta1, cfg.beta2);
            let m = match state.buffers.remove("exp_avg") {
                Some(m) => m.mul_scalar(b1) + g.clone().mul_scalar(1.0 - b1),
                None => g.clone().mul_scalar(1.0 - b1),
            };
            let v = match state.buffers.remove("exp_avg_sq") {
                Some(v) => v.mul_scalar(b2) + g.clone().square().mul_scalar(1.0 - b2),
                None => g.square().mul_scalar(1.0 - b2),
            };
            let t = state.step as i32;
            let bc1 = 1.0 - b1.powi(t);
            let bc2 = 1.0 - b2.powi(t);
            let denom = v.clone().div_scalar(bc2).sqrt().add_scalar(cfg.eps);
            let out = param - m.clone().div(denom).mul_scalar(lr / bc1);
            state.buffers.insert("exp_avg".into(), m);
            state.buffers.insert("exp_avg_sq".into(), v);
            out
        }
    }
}
