//! The optimizer update as one pass over each parameter with its state (resilab-kernels'
//! `optim`), plugged into Burn as a backend extension on the flex device when the models use
//! resilab's kernels (the `native` backend). It computes the same f32 operations in the same
//! order as the tensor formulation in [`crate::update`], so the bits are the same; what it
//! saves is the five to nine passes, each with its own output tensor, that the formulation
//! makes over every parameter, once per worker and step.
//!
//! A parameter or buffer that nothing else holds is updated in place; one that is shared (a
//! rollback snapshot, a replica's copy) is copied first, so no other holder sees the change.

use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Dispatch, DispatchDevice, Flex, backend_extension};
use burn::prelude::*;
use burn::tensor::DType;
use resilab_kernels::optim::{self, Adam, Sgd, State};

use resilab_models::Kernels;

use crate::{OptimizerConfig, OptimizerKind, ParamState};

/// The optimizer updates as Burn operations. A `state` of [`State::First`] means the buffers
/// passed are placeholders of the parameter's length, to be overwritten.
#[backend_extension(Flex)]
pub trait OptimKernels: burn::backend::Backend {
    /// One SGD update without momentum: the new parameter.
    fn resilab_sgd_step(param: FloatTensor<Self>, grad: FloatTensor<Self>, sgd: Sgd) -> FloatTensor<Self>;

    /// One SGD update with momentum: the new parameter and momentum buffer.
    fn resilab_sgd_momentum_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        buf: FloatTensor<Self>,
        sgd: Sgd,
        state: State,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// One Adam update: the new parameter, `exp_avg` and `exp_avg_sq`.
    fn resilab_adam_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        adam: Adam,
        state: State,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
}

/// `t` as a contiguous tensor starting at offset 0 of its buffer (copied when strided), and
/// its length.
fn writable(t: FlexTensor) -> (FlexTensor, usize) {
    let n = t.layout().num_elements();
    let t = match t.layout().contiguous_offsets() {
        Some((0, _)) => t,
        _ => t.to_contiguous(),
    };
    (t, n)
}

/// The values of `t` (its own buffer, taken over by copy-on-write when shared).
fn values_mut(t: &mut FlexTensor, n: usize) -> &mut [f32] {
    &mut t.storage_mut::<f32>()[..n]
}

// The wrappers below checked the lengths and the dtype, so the kernels accept the buffers.
impl OptimKernels for Flex {
    fn resilab_sgd_step(param: FlexTensor, grad: FlexTensor, sgd: Sgd) -> FlexTensor {
        let ((mut p, n), g) = (writable(param), grad.to_contiguous());
        let g = g.as_slice::<f32>().unwrap_or_default();
        optim::sgd(&sgd, values_mut(&mut p, n), g, None, State::First).unwrap_or_else(|e| panic!("resilab SGD step: {e}"));
        p
    }

    fn resilab_sgd_momentum_step(param: FlexTensor, grad: FlexTensor, buf: FlexTensor, sgd: Sgd, state: State) -> (FlexTensor, FlexTensor) {
        let ((mut p, n), (mut b, _), g) = (writable(param), writable(buf), grad.to_contiguous());
        let g = g.as_slice::<f32>().unwrap_or_default();
        optim::sgd(&sgd, values_mut(&mut p, n), g, Some(values_mut(&mut b, n)), state).unwrap_or_else(|e| panic!("resilab SGD step: {e}"));
        (p, b)
    }

    fn resilab_adam_step(
        param: FlexTensor,
        grad: FlexTensor,
        m: FlexTensor,
        v: FlexTensor,
        adam: Adam,
        state: State,
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        let ((mut p, n), (mut m, _), (mut v, _), g) = (writable(param), writable(m), writable(v), grad.to_contiguous());
        let g = g.as_slice::<f32>().unwrap_or_default();
        optim::adam(&adam, values_mut(&mut p, n), g, values_mut(&mut m, n), values_mut(&mut v, n), state)
            .unwrap_or_else(|e| panic!("resilab Adam step: {e}"));
        (p, m, v)
    }
}

/// Whether [`update`] takes this parameter: `kernels` is [`Kernels::Resilab`], everything lives on the
/// flex device as f32, the gradient and any buffer have the parameter's length, and Adam has
/// both moments or neither (a state that lost one is left to the tensor formulation).
pub(crate) fn applies(cfg: &OptimizerConfig, param: &Tensor<1>, grad: &Tensor<1>, state: &ParamState, kernels: Kernels) -> bool {
    let n = param.dims();
    let moments = ["exp_avg", "exp_avg_sq"].map(|k| state.buffers.contains_key(k));
    kernels.resilab()
        && (cfg.kind != OptimizerKind::Adam || moments[0] == moments[1])
        && matches!(param.device().as_dispatch(), DispatchDevice::Flex(_))
        && [param, grad].into_iter().chain(state.buffers.values()).all(|t| t.dtype() == DType::F32 && t.dims() == n)
}

/// The fused update: the same step as [`crate::update`], for a parameter [`applies`] takes.
///
/// The state is never differentiated: a tensor that arrives tracked by autodiff (state
/// restored onto an autodiff device, a gradient a hook built there) is updated as plain data.
pub(crate) fn update(cfg: &OptimizerConfig, lr: f64, param: Tensor<1>, grad: Tensor<1>, state: &mut ParamState) -> Tensor<1> {
    let (param, grad) = (param.without_autodiff(), grad.without_autodiff());
    state.step += 1;
    let f = |v: f64| v as f32;
    let decay = (cfg.weight_decay != 0.0).then(|| f(cfg.weight_decay));
    let (device, dims) = (param.device(), param.dims());
    // The previous buffer, or a placeholder for the kernel to overwrite.
    let mut take = |name: &str| match state.buffers.remove(name) {
        Some(b) => (b.without_autodiff().into_dispatch(), State::Continue),
        None => (Tensor::<1>::zeros(dims, &device).into_dispatch(), State::First),
    };
    match cfg.kind {
        OptimizerKind::Sgd => {
            let sgd = Sgd {
                lr: f(lr),
                momentum: (cfg.momentum != 0.0).then(|| f(cfg.momentum)),
                keep: (cfg.dampening != 0.0).then(|| f(1.0 - cfg.dampening)),
                weight_decay: decay,
                nesterov: cfg.nesterov,
            };
            let (param, grad) = (param.into_dispatch(), grad.into_dispatch());
            if sgd.momentum.is_none() {
                return Tensor::from_dispatch(<Dispatch as OptimKernels>::resilab_sgd_step(param, grad, sgd));
            }
            let (buf, first) = take("momentum_buffer");
            let (p, b) = <Dispatch as OptimKernels>::resilab_sgd_momentum_step(param, grad, buf, sgd, first);
            state.buffers.insert("momentum_buffer".into(), Tensor::from_dispatch(b));
            Tensor::from_dispatch(p)
        }
        OptimizerKind::Adam => {
            let (b1, b2, t) = (cfg.beta1, cfg.beta2, state.step as i32);
            let adam = Adam {
                beta1: f(b1),
                one_minus_beta1: f(1.0 - b1),
                beta2: f(b2),
                one_minus_beta2: f(1.0 - b2),
                correction2: f(1.0 - b2.powi(t)),
                step_size: f(lr / (1.0 - b1.powi(t))),
                eps: f(cfg.eps),
                weight_decay: decay,
            };
            let ((m, first), (v, _)) = (take("exp_avg"), take("exp_avg_sq"));
            let (p, m, v) = <Dispatch as OptimKernels>::resilab_adam_step(param.into_dispatch(), grad.into_dispatch(), m, v, adam, first);
            state.buffers.insert("exp_avg".into(), Tensor::from_dispatch(m));
            state.buffers.insert("exp_avg_sq".into(), Tensor::from_dispatch(v));
            Tensor::from_dispatch(p)
        }
    }
}
