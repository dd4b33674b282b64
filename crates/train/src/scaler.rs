//! fp16's dynamic loss scaling, as PyTorch's `torch.amp.GradScaler` does it: the loss is
//! multiplied by the scale before the backward pass, so that small gradients survive fp16's
//! narrow range; before the optimizer step the gradients are multiplied by the scale's
//! reciprocal, and a step whose gradients hold an infinity or a NaN is skipped and the scale
//! halved; after `growth_interval` steps in a row without one, the scale doubles.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Error, Grads, Result};

fn default_init() -> f64 {
    65536.0
}
fn default_growth_factor() -> f64 {
    2.0
}
fn default_backoff_factor() -> f64 {
    0.5
}
fn default_growth_interval() -> u64 {
    2000
}

/// `[train.loss_scale]`: the dynamic loss scale of `train.precision = "fp16"` (the defaults
/// are GradScaler's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LossScaleConfig {
    /// The scale of the first step (2^16).
    #[serde(default = "default_init")]
    pub init: f64,
    /// Factor the scale grows by after `growth_interval` steps without an overflow.
    #[serde(default = "default_growth_factor")]
    pub growth_factor: f64,
    /// Factor the scale shrinks by after a step whose gradients overflowed.
    #[serde(default = "default_backoff_factor")]
    pub backoff_factor: f64,
    /// Steps in a row without an overflow before the scale grows.
    #[serde(default = "default_growth_interval")]
    pub growth_interval: u64,
}

impl Default for LossScaleConfig {
    fn default() -> Self {
        Self {
            init: default_init(),
            growth_factor: default_growth_factor(),
            backoff_factor: default_backoff_factor(),
            growth_interval: default_growth_interval(),
        }
    }
}

impl LossScaleConfig {
    /// Checks the values; errors name the key.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, v: String, want: &str| Err(Error::Config(format!("train.loss_scale.{key} = {v} must be {want}")));
        if !(self.init.is_finite() && self.init > 0.0 && (self.init as f32).is_normal()) {
            return bad("init", self.init.to_string(), "a positive number within float32's normal range");
        }
        if !(self.growth_factor.is_finite() && self.growth_factor > 1.0) {
            return bad("growth_factor", self.growth_factor.to_string(), "a number above 1");
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return bad("backoff_factor", self.backoff_factor.to_string(), "between 0 and 1 (exclusive)");
        }
        if self.growth_interval == 0 {
            return bad("growth_interval", "0".into(), ">= 1");
        }
        Ok(())
    }
}

/// One worker's loss scaler: the scale (a float32, as GradScaler keeps it) and the steps
/// since the last overflow or growth.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalerState {
    /// The scale the next step multiplies its loss by.
    pub scale: f32,
    /// Steps in a row without an overflow since the scale last changed.
    pub growth_tracker: u64,
}

/// A worker's loss scaler: its state and its configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct LossScaler {
    /// The state a checkpoint keeps.
    pub state: ScalerState,
    /// How the scale changes.
    pub config: LossScaleConfig,
}

impl LossScaler {
    /// A scaler at `config.init`.
    pub fn new(config: &LossScaleConfig) -> Self {
        Self { state: ScalerState { scale: config.init as f32, growth_tracker: 0 }, config: config.clone() }
    }

    /// GradScaler's `update()` after a step whose gradients did (`found_inf`) or did not
    /// overflow: back off at once, or grow after `growth_interval` clean steps (unless the
    /// grown scale would not be finite).
    pub fn update(&mut self, found_inf: bool) {
        let s = &mut self.state;
        if found_inf {
            s.scale *= self.config.backoff_factor as f32;
            s.growth_tracker = 0;
            return;
        }
        s.growth_tracker += 1;
        if s.growth_tracker == self.config.growth_interval {
            let grown = s.scale * self.config.growth_factor as f32;
            if grown.is_finite() {
                s.scale = grown;
            }
            s.growth_tracker = 0;
        }
    }
}

/// GradScaler's `unscale_`: `grads` multiplied by the reciprocal of `scale` (computed in
/// float64 and rounded to float32, as PyTorch does), and whether any of them held an infinity
/// or a NaN before.
pub fn unscale(grads: &Grads, scale: f32) -> (Grads, bool) {
    let inv = (1.0 / f64::from(scale)) as f32;
    // 0 * x is 0 for every finite x and NaN for an infinity or a NaN: one sum tells.
    let mut probe: Option<Tensor<1>> = None;
    let mut out = Grads::new();
    for (name, g) in grads {
        let zero = g.clone().mul_scalar(0.0).sum();
        probe = Some(match probe {
            Some(p) => p + zero,
            None => zero,
        });
        out.insert(name.clone(), g.clone().mul_scalar(inv));
    }
    let found_inf = probe.is_some_and(|p| !p.into_scalar::<f32>().is_finite());
    (out, found_inf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_backs_off_at_once_and_grows_after_the_interval() {
        let config = LossScaleConfig { growth_interval: 3, ..LossScaleConfig::default() };
        let mut s = LossScaler::new(&config);
        assert_eq!(s.state.scale, 65536.0);
        s.update(true);
        assert_eq!(s.state, ScalerState { scale: 32768.0, growth_tracker: 0 });
        s.update(false);
        s.update(false);
        assert_eq!(s.state, ScalerState { scale: 32768.0, growth_tracker: 2 });
        s.update(false);
        assert_eq!(s.state, ScalerState { scale: 65536.0, growth_tracker: 0 });
        s.update(false);
        s.update(true);
        assert_eq!(s.state, ScalerState { scale: 32768.0, growth_tracker: 0 }, "an overflow resets the count");
    }

    #[test]
    fn a_scale_that_would_overflow_stays() {
        let config = LossScaleConfig { init: 2e38, growth_interval: 1, ..LossScaleConfig::default() };
        let mut s = LossScaler::new(&config);
        s.update(false);
        assert_eq!(s.state.scale, 2e38f32);
    }

    #[test]
    fn unscaling_divides_and_finds_every_kind_of_non_finite_value() {
        let device = Device::flex();
        let grads = |v: [f32; 3]| Grads::from([("a".to_string(), Tensor::<1>::from_floats(v, &device))]);
        let (out, found) = unscale(&grads([2.0, -4.0, 1e30]), 4.0);
        assert!(!found);
        assert_eq!(out["a"].clone().into_data().try_to_vec::<f32>().unwrap(), [0.5, -1.0, 2.5e29]);
        for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            assert!(unscale(&grads([1.0, bad, 2.0]), 4.0).1, "{bad}");
        }
        // Large finite values whose sum would overflow are not an overflow.
        assert!(!unscale(&grads([3e38, 3e38, 3e38]), 1.0).1);
    }

    #[test]
    fn bad_values_name_their_key() {
        for (c, key) in [
            (LossScaleConfig { init: 0.0, ..Default::default() }, "init"),
            (LossScaleConfig { init: 1e39, ..Default::default() }, "init"),
            (LossScaleConfig { growth_factor: 1.0, ..Default::default() }, "growth_factor"),
            (LossScaleConfig { backoff_factor: 1.0, ..Default::default() }, "backoff_factor"),
            (LossScaleConfig { growth_interval: 0, ..Default::default() }, "growth_interval"),
        ] {
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(&format!("train.loss_scale.{key}")), "{e}");
        }
    }
}
