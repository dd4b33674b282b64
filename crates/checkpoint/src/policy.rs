use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What to do when a dataset's stored digest does not match its data on load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnMismatch {
    /// Refuse to load, naming the datasets (default).
    #[default]
    Error,
    /// Use the newest checkpoint that verifies.
    Fallback,
    /// Load the altered values anyway and report them (checkpoint-alteration experiments).
    Load,
}

fn default_keep() -> usize {
    3
}

/// The `[checkpoint]` section of a run configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Save every this many steps.
    #[serde(default)]
    pub every_steps: Option<u64>,
    /// Instead of `every_steps`: this multiple of Daly's optimal interval for the run's own
    /// checkpoint cost and system MTBF (its modelled step time, its state at the storage
    /// bandwidth, and the rate of its random-arrival faults), in whole steps; resolved into
    /// `every_steps` before training (needs `parallel.compute.gflops`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daly_factor: Option<f64>,
    /// Save at the end of every epoch.
    #[serde(default)]
    pub every_epoch: bool,
    /// Keep the newest this many checkpoints (0 keeps all).
    #[serde(default = "default_keep")]
    pub keep_last: usize,
    /// Directory of the checkpoints (default: `<out>/checkpoints`; a relative path is taken
    /// relative to the run's output directory, `--out`).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Use a `dir` that already holds files resilab did not write (they are never touched;
    /// resilab lists, replaces and prunes only its own marked checkpoints). Without it such a
    /// directory is refused.
    #[serde(default)]
    pub adopt_dir: bool,
    /// Digest mismatch policy when loading: `error`, `fallback` or `load`.
    #[serde(default)]
    pub on_mismatch: OnMismatch,
}

impl CheckpointConfig {
    /// Checks the values a TOML file cannot rule out, naming the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.every_steps == Some(0) {
            return Err("checkpoint.every_steps = 0: give a number of steps >= 1, or leave the key out for no step checkpoints".into());
        }
        if let Some(f) = self.daly_factor {
            if !(f.is_finite() && f > 0.0) {
                return Err(format!("checkpoint.daly_factor = {f} must be a number > 0"));
            }
            if self.every_steps.is_some() {
                return Err(
                    "checkpoint.daly_factor and checkpoint.every_steps are both set: give one (daly_factor is resolved into every_steps)"
                        .into(),
                );
            }
        }
        if self.dir.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
            return Err("checkpoint.dir = \"\": name a directory, or leave the key out for <out>/checkpoints".into());
        }
        Ok(())
    }

    /// The checkpoint root of a run writing into `out`: `dir` (relative to `out` unless
    /// absolute), or `<out>/checkpoints`.
    pub fn root(&self, out: &Path) -> PathBuf {
        match &self.dir {
            Some(d) => out.join(d),
            None => out.join("checkpoints"),
        }
    }

    /// Whether any checkpoint will be written.
    pub fn enabled(&self) -> bool {
        self.every_steps.is_some_and(|k| k > 0) || self.every_epoch || self.daly_factor.is_some()
    }

    /// Whether a checkpoint is due after `step` (1-based), `epoch_end` telling whether it closed
    /// an epoch.
    pub fn due(&self, step: u64, epoch_end: bool) -> bool {
        self.every_steps.is_some_and(|k| k > 0 && step.is_multiple_of(k)) || (self.every_epoch && epoch_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_interval_and_empty_dir_are_errors_and_relative_dirs_sit_under_out() {
        let c = CheckpointConfig { every_steps: Some(0), ..Default::default() };
        assert!(c.validate().unwrap_err().contains("checkpoint.every_steps = 0"));
        let c = CheckpointConfig { dir: Some(PathBuf::new()), ..Default::default() };
        assert!(c.validate().unwrap_err().contains("checkpoint.dir"));
        let c = CheckpointConfig { dir: Some("ck".into()), every_steps: Some(5), ..Default::default() };
        c.validate().unwrap();
        assert_eq!(c.root(Path::new("runs/a")), Path::new("runs/a/ck"));
        let c = CheckpointConfig { dir: Some("/abs/ck".into()), ..Default::default() };
        assert_eq!(c.root(Path::new("runs/a")), Path::new("/abs/ck"));
        assert_eq!(CheckpointConfig::default().root(Path::new("o")), Path::new("o/checkpoints"));
    }
}
