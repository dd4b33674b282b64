//! Learning-rate schedules: a pure function of the global step, so the schedule's position is
//! fully described by the step number (checkpoints need nothing else).

use serde::{Deserialize, Serialize};

/// Schedule family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    /// The base learning rate throughout.
    Constant,
    /// Multiply by `gamma` every `step_epochs` epochs (PyTorch's `StepLR`).
    Step,
    /// Cosine annealing from the base rate to `min_lr` over the run (PyTorch's
    /// `CosineAnnealingLR` with `T_max` = total steps).
    Cosine,
}

fn default_kind() -> ScheduleKind {
    ScheduleKind::Constant
}
fn default_gamma() -> f64 {
    0.1
}
fn default_step_epochs() -> usize {
    30
}

/// The `[schedule]` section of a run configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    /// `constant` (default), `step` or `cosine`.
    #[serde(default = "default_kind")]
    pub kind: ScheduleKind,
    /// `step`: epochs between decays.
    #[serde(default = "default_step_epochs")]
    pub step_epochs: usize,
    /// `step`: decay factor.
    #[serde(default = "default_gamma")]
    pub gamma: f64,
    /// `cosine`: final learning rate.
    #[serde(default)]
    pub min_lr: f64,
    /// Linear warm-up from 0 over this many steps (any kind).
    #[serde(default)]
    pub warmup_steps: u64,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self { kind: default_kind(), step_epochs: default_step_epochs(), gamma: default_gamma(), min_lr: 0.0, warmup_steps: 0 }
    }
}

impl ScheduleConfig {
    /// Checks ranges; the message names the key.
    pub fn validate(&self) -> crate::Result<()> {
        if self.kind == ScheduleKind::Step && (self.step_epochs == 0 || !(self.gamma > 0.0 && self.gamma <= 1.0)) {
            return Err(crate::Error::Config(format!(
                "schedule.step_epochs = {} must be >= 1 and schedule.gamma = {} in (0, 1]",
                self.step_epochs, self.gamma
            )));
        }
        if !(self.min_lr >= 0.0 && self.min_lr.is_finite()) {
            return Err(crate::Error::Config(format!("schedule.min_lr = {} must be >= 0", self.min_lr)));
        }
        Ok(())
    }

    /// Learning rate at global step `step` (0-based) of a run of `total_steps` steps with
    /// `steps_per_epoch` steps per epoch.
    pub fn lr(&self, base: f64, step: u64, steps_per_epoch: u64, total_steps: u64) -> f64 {
        let lr = match self.kind {
            ScheduleKind::Constant => base,
            ScheduleKind::Step => {
                let epoch = step / steps_per_epoch.max(1);
                base * self.gamma.powi((epoch / self.step_epochs as u64) as i32)
            }
            ScheduleKind::Cosine => {
                let t = step as f64 / total_steps.max(1) as f64;
                self.min_lr + 0.5 * (base - self.min_lr) * (1.0 + (std::f64::consts::PI * t.min(1.0)).cos())
            }
        };
        if step < self.warmup_steps { lr * (step + 1) as f64 / self.warmup_steps as f64 } else { lr }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_of_the_schedules() {
        let step = ScheduleConfig { kind: ScheduleKind::Step, step_epochs: 2, gamma: 0.5, ..Default::default() };
        assert_eq!(step.lr(1.0, 0, 10, 100), 1.0);
        assert_eq!(step.lr(1.0, 19, 10, 100), 1.0);
        assert_eq!(step.lr(1.0, 20, 10, 100), 0.5);
        assert_eq!(step.lr(1.0, 45, 10, 100), 0.25);
        let cos = ScheduleConfig { kind: ScheduleKind::Cosine, min_lr: 0.1, ..Default::default() };
        assert!((cos.lr(1.0, 0, 10, 100) - 1.0).abs() < 1e-12);
        assert!((cos.lr(1.0, 50, 10, 100) - 0.55).abs() < 1e-12);
        assert!((cos.lr(1.0, 100, 10, 100) - 0.1).abs() < 1e-12);
        let warm = ScheduleConfig { warmup_steps: 4, ..Default::default() };
        assert_eq!(warm.lr(1.0, 0, 10, 100), 0.25);
        assert_eq!(warm.lr(1.0, 4, 10, 100), 1.0);
    }
}
