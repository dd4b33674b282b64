//! Evaluating a checkpoint without training: the test accuracy of the model it holds and how
//! many of its values are NaN, infinite or extreme. This is what studies of checkpoint
//! alteration need after each injection (per-bit sensitivity, bit masks): no training steps.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::prelude::*;
use resilab_checkpoint::{OnMismatch, Probe};
use resilab_train::{ParallelMode, evaluate};
use serde::Serialize;

use crate::{Result, RunConfig, build_trainer};

/// What `resilab eval` reports.
#[derive(Clone, Debug, Serialize)]
pub struct EvalReport {
    /// The checkpoint directory read.
    pub checkpoint: PathBuf,
    /// The model evaluated: `all` stages joined, or the data-parallel replica's rank.
    pub worker: String,
    /// Training step the checkpoint holds.
    pub step: u64,
    /// Model label.
    pub model: String,
    /// Test images evaluated.
    pub test_images: usize,
    /// Top-1 test accuracy in `[0, 1]` (NaN logits count as wrong).
    pub test_acc: f64,
    /// Mean test cross-entropy (NaN when the model produces NaN).
    pub test_loss: f64,
    /// Values (parameters and buffers) of the model evaluated.
    pub values: usize,
    /// Of those, NaN.
    pub nan: usize,
    /// Of those, ±Inf.
    pub inf: usize,
    /// Of those, finite with magnitude above `extreme_threshold`.
    pub extreme: usize,
    /// The threshold (the run's `detect.extreme_threshold`, 1e10 by default).
    pub extreme_threshold: f64,
    /// Datasets whose stored digest no longer matches their values (altered after writing).
    pub digest_mismatches: Vec<String>,
}

/// Evaluates the checkpoint `target` names (a worker file, a checkpoint directory, or a
/// directory of checkpoints, whose newest is used) on `device`. The run's configuration comes
/// from the checkpoint, or from `config` when given, with `overrides` (`key=value`) applied:
/// `data.test_size=1000`, or `data.path=...` for a dataset that lives elsewhere now. Values
/// are loaded even where their digests do not match (that is the point); every file is checked
/// by `probe` first, since the HDF5 library can crash on structurally corrupt files. A
/// data-parallel worker file (`worker-2.h5`) evaluates that replica; a directory, replica 0;
/// pipeline stages are joined into the whole model.
pub fn eval(target: &Path, config: Option<&Path>, overrides: &[String], device: &Device, probe: Probe<'_>) -> Result<EvalReport> {
    let file = resilab_checkpoint::primary_file(target)?;
    probe(&file)?;
    let cfg = match config {
        Some(path) => RunConfig::load(path, overrides)?,
        None => {
            let meta = resilab_checkpoint::read_meta(&file)?;
            RunConfig::from_stored_toml(&meta.config, overrides, &format!("the configuration stored in {}", file.display()))?
        }
    };
    let split = Arc::new(resilab_data::load(&cfg.data)?);
    let mut trainer = build_trainer(&cfg, split.clone(), device)?;
    let template = trainer.snapshot();
    // `file` has been probed already; the other worker files are probed as they are loaded.
    let probe_rest = |p: &Path| if p == file { Ok(()) } else { probe(p) };
    let (state, report) = resilab_checkpoint::load(&file, &template, OnMismatch::Load, &probe_rest)?;
    trainer.restore(&state)?;
    let pipeline = cfg.parallel.mode == ParallelMode::Pipeline;
    // A worker file evaluates its own replica: the rank it stores, whatever its name.
    let rank = if pipeline || !target.is_file() { 0 } else { resilab_checkpoint::file_rank(target)?.min(trainer.workers.len() - 1) };
    let (net, evaluated) = if pipeline {
        (trainer.model(), (0..state.workers.len()).collect::<Vec<_>>())
    } else {
        (trainer.workers[rank].net.clone(), vec![rank])
    };
    let e = evaluate(&net, &split.test, &split.norm, cfg.train.eval_batch_size, trainer.device());
    let threshold = cfg.detect.extreme_threshold;
    let (mut values, mut nan, mut inf, mut extreme) = (0, 0, 0, 0);
    for w in evaluated.iter().map(|&r| &state.workers[r]) {
        for v in w.params.values().flat_map(|t| &t.values) {
            values += 1;
            if v.is_nan() {
                nan += 1;
            } else if v.is_infinite() {
                inf += 1;
            } else if f64::from(v.abs()) > threshold {
                extreme += 1;
            }
        }
    }
    Ok(EvalReport {
        checkpoint: report.dir,
        worker: if pipeline { "all".into() } else { rank.to_string() },
        step: state.step,
        model: cfg.model.label(),
        test_images: split.test.len(),
        test_acc: e.accuracy,
        test_loss: e.loss,
        values,
        nan,
        inf,
        extreme,
        extreme_threshold: threshold,
        digest_mismatches: report.mismatched,
    })
}
