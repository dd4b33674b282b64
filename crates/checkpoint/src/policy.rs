use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What to do when a dataset's stored digest does not match its data on load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Save every this many steps.
    #[serde(default)]
    pub every_steps: Option<u64>,
    /// Save at the end of every epoch.
    #[serde(default)]
    pub every_epoch: bool,
    /// Keep the newest this many checkpoints (0 keeps all).
    #[serde(default = "default_keep")]
    pub keep_last: usize,
    /// Directory of the checkpoints (default: `<out>/checkpoints`).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Digest mismatch policy when loading: `error`, `fallback` or `load`.
    #[serde(default)]
    pub on_mismatch: OnMismatch,
}

impl CheckpointConfig {
    /// Whether any checkpoint will be written.
    pub fn enabled(&self) -> bool {
        self.every_steps.is_some_and(|k| k > 0) || self.every_epoch
    }

    /// Whether a checkpoint is due after `step` (1-based), `epoch_end` telling whether it closed
    /// an epoch.
    pub fn due(&self, step: u64, epoch_end: bool) -> bool {
        self.every_steps.is_some_and(|k| k > 0 && step.is_multiple_of(k)) || (self.every_epoch && epoch_end)
    }
}
