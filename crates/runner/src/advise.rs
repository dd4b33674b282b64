//! The costs `resilab advise --from-run` reads from a finished run: its mean checkpoint write
//! and its mean training step, both measured.

use std::path::Path;

use serde::Deserialize;

use crate::{Error, Result};

/// The fields of a run's `summary.json` that give its costs.
#[derive(Debug, Deserialize)]
struct Costs {
    steps: u64,
    train_s: f64,
    checkpoints: usize,
    checkpoint_s: f64,
}

/// Mean seconds per checkpoint write and per training step of the run in `dir`.
pub fn run_costs(dir: &Path) -> Result<(f64, f64)> {
    let path = dir.join("summary.json");
    let text = std::fs::read(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
    let c: Costs = serde_json::from_slice(&text).map_err(|e| Error::Config(format!("{}: not a run summary ({e})", path.display())))?;
    if c.checkpoints == 0 {
        return Err(Error::Config(format!("{}: the run wrote no checkpoints, so it measured no checkpoint cost", path.display())));
    }
    if c.steps == 0 {
        return Err(Error::Config(format!("{}: the run trained no steps, so it measured no step time", path.display())));
    }
    Ok((c.checkpoint_s / c.checkpoints as f64, c.train_s / c.steps as f64))
}
