//! SGD with momentum and Adam, with their state held by resilab as named tensors.
//!
//! State lives in an [`OptimState`] keyed by the parameter's PyTorch-style name, with buffers
//! named as in PyTorch's `optimizer.state_dict()`: `momentum_buffer` for SGD, `exp_avg` and
//! `exp_avg_sq` (plus a per-parameter `step`) for Adam. Faults, checkpoints, rollbacks and
//! replica copies address it by those names. The update rules are PyTorch's (and Burn's, with
//! dampening 0): L2 weight decay is added to the gradient before the momentum or moments.

use std::collections::BTreeMap;

use burn::prelude::*;

use serde::{Deserialize, Serialize};

/// Optimizer algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Stochastic gradient descent with (optional) momentum.
    Sgd,
    /// Adam (Kingma and Ba), with L2 weight decay as PyTorch's `Adam`.
    Adam,
}

fn default_kind() -> OptimizerKind {
    OptimizerKind::Sgd
}
fn default_lr() -> f64 {
    0.05
}
fn default_momentum() -> f64 {
    0.9
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.999
}
fn default_eps() -> f64 {
    1e-8
}

/// The `[optimizer]` section of a run configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    /// `sgd` (default) or `adam`.
    #[serde(default = "default_kind")]
    pub kind: OptimizerKind,
    /// Base learning rate.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// SGD momentum (0 disables the momentum buffer).
    #[serde(default = "default_momentum")]
    pub momentum: f64,
    /// SGD dampening (PyTorch's default 0).
    #[serde(default)]
    pub dampening: f64,
    /// SGD Nesterov momentum.
    #[serde(default)]
    pub nesterov: bool,
    /// L2 penalty added to the gradient.
    #[serde(default)]
    pub weight_decay: f64,
    /// Adam beta1.
    #[serde(default = "default_beta1")]
    pub beta1: f64,
    /// Adam beta2.
    #[serde(default = "default_beta2")]
    pub beta2: f64,
    /// Adam epsilon.
    #[serde(default = "default_eps")]
    pub eps: f64,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        Self {
            kind: default_kind(),
            lr: default_lr(),
            momentum: default_momentum(),
            dampening: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            beta1: default_beta1(),
            beta2: default_beta2(),
            eps: default_eps(),
        }
    }
}

impl OptimizerConfig {
    /// The buffers this optimizer keeps per parameter, by their PyTorch names: none for plain
    /// SGD, `momentum_buffer` for SGD with momentum, `exp_avg` and `exp_avg_sq` for Adam.
    pub fn buffer_names(&self) -> &'static [&'static str] {
        match self.kind {
            OptimizerKind::Sgd if self.momentum > 0.0 => &["momentum_buffer"],
            OptimizerKind::Sgd => &[],
            OptimizerKind::Adam => &["exp_avg", "exp_avg_sq"],
        }
    }

    /// Checks ranges; the message names the key.
    pub fn validate(&self) -> crate::Result<()> {
        let check = |ok: bool, key: &str, v: f64, range: &str| {
            if ok { Ok(()) } else { Err(crate::Error::Config(format!("optimizer.{key} = {v} must be {range}"))) }
        };
        check(self.lr.is_finite() && self.lr > 0.0, "lr", self.lr, "> 0")?;
        check((0.0..1.0).contains(&self.momentum), "momentum", self.momentum, "in [0, 1)")?;
        check((0.0..=1.0).contains(&self.dampening), "dampening", self.dampening, "in [0, 1]")?;
        check(self.weight_decay >= 0.0 && self.weight_decay.is_finite(), "weight_decay", self.weight_decay, ">= 0")?;
        check((0.0..1.0).contains(&self.beta1), "beta1", self.beta1, "in [0, 1)")?;
        check((0.0..1.0).contains(&self.beta2), "beta2", self.beta2, "in [0, 1)")?;
        check(self.eps > 0.0, "eps", self.eps, "> 0")?;
        if self.nesterov && (self.momentum == 0.0 || self.dampening != 0.0) {
            return Err(crate::Error::Config("optimizer.nesterov = true needs momentum > 0 and dampening = 0".into()));
        }
        Ok(())
    }
}

/// The optimizer state of one parameter.
#[derive(Clone, Debug, Default)]
pub struct ParamState {
    /// Number of updates applied (Adam's bias correction uses it).
    pub step: u64,
    /// Named buffers, flattened: `momentum_buffer`, or `exp_avg` and `exp_avg_sq`.
    pub buffers: BTreeMap<String, Tensor<1>>,
}

/// The optimizer state of a whole model, keyed by parameter name.
#[derive(Clone, Debug, Default)]
pub struct OptimState {
    /// One entry per parameter that has been updated at least once.
    pub params: BTreeMap<String, ParamState>,
}

impl OptimState {
    /// Total number of scalars in all buffers.
    pub fn num_values(&self) -> usize {
        self.params.values().flat_map(|p| p.buffers.values()).map(|t| t.dims()[0]).sum()
    }
}
