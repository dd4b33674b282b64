//! Evaluating a checkpoint without training: the test accuracy of the model it holds and how
//! many of its values are NaN, infinite or extreme. This is what studies of checkpoint
//! alteration need after each injection (per-bit sensitivity, bit masks): no training steps.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use resilab_checkpoint::{OnMismatch, Probe};
use resilab_models::Compute;
use resilab_train::{ParallelMode, evaluate};
use serde::Serialize;

use crate::{Error, Result, RunConfig, build_trainer};

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
    /// For an altered worker file, the clean file it was made from, evaluated the same way.
    pub clean: Option<Clean>,
    /// For an imported checkpoint, whether a probe verified its forward pass (`None`: no import).
    /// An unverified one's accuracy may not be the source model's.
    pub forward_pass: Option<resilab_checkpoint::ForwardPass>,
}

/// The clean checkpoint beside an altered one: the baseline its accuracy is read against.
#[derive(Clone, Debug, Serialize)]
pub struct Clean {
    /// The clean worker file.
    pub file: PathBuf,
    /// Its top-1 test accuracy.
    pub test_acc: f64,
    /// Its mean test cross-entropy.
    pub test_loss: f64,
}

/// Evaluates the checkpoint `target` names (a worker file, a checkpoint directory, or a
/// directory of checkpoints, whose newest is used) on `device`. The run's configuration comes
/// from the checkpoint, or from `config` when given, with `overrides` (`key=value`) applied:
/// `data.test_size=1000`, or `data.path=...` for a dataset that lives elsewhere now. Values
/// are loaded even where their digests do not match (that is the point); every file is checked
/// by `probe` first, since the HDF5 library can crash on structurally corrupt files. A
/// data-parallel worker file (`worker-2.h5`) evaluates that replica; a directory, replica 0;
/// pipeline stages are joined into the whole model. An altered worker file is evaluated beside
/// the clean file it was made from, when that is known ([`clean_source`]).
/// With `predictions`, each test image's label, predicted class and logits are written there
/// (CSV, a new file), for a comparison with another framework image by image.
pub fn eval(
    target: &Path,
    config: Option<&Path>,
    overrides: &[String],
    compute: &Compute,
    probe: Probe<'_>,
    predictions: Option<&Path>,
) -> Result<EvalReport> {
    if let Some(p) = predictions.filter(|p| p.symlink_metadata().is_ok()) {
        return Err(Error::Config(format!("--predictions {}: the file exists, and eval never replaces a file", p.display())));
    }
    let file = resilab_checkpoint::primary_file(target)?;
    probe(&file)?;
    let forward_pass = resilab_checkpoint::forward_pass(&file)?;
    let cfg = match config {
        Some(path) => RunConfig::load(path, overrides)?,
        None => {
            let meta = resilab_checkpoint::read_meta(&file)?;
            RunConfig::from_stored_toml(&meta.config, overrides, &format!("the configuration stored in {}", file.display()))?
        }
    };
    let split = Arc::new(resilab_data::load(&cfg.data)?);
    let mut trainer = build_trainer(&cfg, split.clone(), compute)?;
    let template = trainer.snapshot();
    // `file` has been probed already; the other worker files are probed as they are loaded.
    let probe_rest = |p: &Path| if p == file { Ok(()) } else { probe(p) };
    let (state, report) = resilab_checkpoint::load(&file, &template, OnMismatch::Load, &probe_rest)?;
    let pipeline = cfg.parallel.mode == ParallelMode::Pipeline;
    // A worker file evaluates its own replica: the rank it stores, whatever its name.
    let rank = if pipeline || !target.is_file() { 0 } else { resilab_checkpoint::file_rank(target)?.min(trainer.workers.len() - 1) };
    // One replica, or with `None` the pipeline's stages joined into the whole model.
    let replica = (!pipeline).then_some(rank);
    let evaluated: Vec<usize> = replica.map_or_else(|| (0..state.workers.len()).collect(), |r| vec![r]);
    let (test_acc, test_loss) = accuracy(&mut trainer, &state, &cfg, &split, replica)?;
    if let Some(path) = predictions {
        write_predictions(path, &trainer, &cfg, &split, replica)?;
    }
    let threshold = cfg.detect.extreme_threshold;
    let counts = value_counts(evaluated.iter().map(|&r| &state.workers[r]), threshold);
    let clean = match (target.is_file() && !report.mismatched.is_empty()).then(|| clean_source(target, rank)).flatten() {
        Some(source) => {
            let (clean_state, _) = resilab_checkpoint::load(&source, &template, OnMismatch::Load, probe)?;
            let (acc, loss) = accuracy(&mut trainer, &clean_state, &cfg, &split, replica)?;
            Some(Clean { file: source, test_acc: acc, test_loss: loss })
        }
        None => None,
    };
    Ok(EvalReport {
        checkpoint: report.dir,
        worker: if pipeline { "all".into() } else { rank.to_string() },
        step: state.step,
        model: cfg.model.label(),
        test_images: split.test.len(),
        test_acc,
        test_loss,
        values: counts[0],
        nan: counts[1],
        inf: counts[2],
        extreme: counts[3],
        extreme_threshold: threshold,
        digest_mismatches: report.mismatched,
        clean,
        forward_pass,
    })
}

/// Test accuracy and loss of `state` restored into `trainer`: replica `rank`, or the whole
/// pipeline with `None`.
fn accuracy(
    trainer: &mut resilab_train::Trainer,
    state: &resilab_train::TrainState,
    cfg: &RunConfig,
    split: &resilab_data::Split,
    rank: Option<usize>,
) -> Result<(f64, f64)> {
    trainer.restore(state)?;
    let net = match rank {
        Some(r) => trainer.workers[r].net.clone(),
        None => trainer.model(),
    };
    let e = evaluate(&net, &split.test, &split.norm, cfg.train.eval_batch_size, trainer.device());
    Ok((e.accuracy, e.loss))
}

/// Writes the prediction of the model `accuracy` last restored (replica `rank`, or the whole
/// pipeline) for every test image to `path`: `image, label, predicted, logit_0, ...`.
fn write_predictions(
    path: &Path,
    trainer: &resilab_train::Trainer,
    cfg: &RunConfig,
    split: &resilab_data::Split,
    rank: Option<usize>,
) -> Result<()> {
    let net = match rank {
        Some(r) => trainer.workers[r].net.clone(),
        None => trainer.model(),
    };
    let rows = resilab_train::predict(&net, &split.test, &split.norm, cfg.train.eval_batch_size, trainer.device())?;
    let csv_err = |e: csv::Error| Error::Csv { path: path.to_path_buf(), source: e };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let mut w = resilab_text::CsvWriter::from_writer(file);
    // Each column with its value: the image's index and the prediction's named fields, then one
    // column per class.
    type Column = (String, Box<dyn Fn(usize, &resilab_train::Prediction) -> String>);
    let classes = rows.first().map_or(0, |r| r.logits.len());
    let mut columns: Vec<Column> = vec![
        ("image".into(), Box::new(|i, _| i.to_string())),
        ("label".into(), Box::new(|_, p| p.label.to_string())),
        ("predicted".into(), Box::new(|_, p| p.predicted.to_string())),
    ];
    columns.extend(
        (0..classes)
            .map(|k| -> Column { (format!("logit_{k}"), Box::new(move |_, p| p.logits.get(k).map_or(String::new(), f32::to_string))) }),
    );
    w.write_record(columns.iter().map(|(name, _)| name)).map_err(csv_err)?;
    for (i, r) in rows.iter().enumerate() {
        w.write_record(columns.iter().map(|(_, value)| value(i, r))).map_err(csv_err)?;
    }
    w.flush().map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

/// Values, then NaN, ±Inf and extreme (finite, |v| above `threshold`) counts over the
/// parameters of `workers`.
fn value_counts<'a>(workers: impl Iterator<Item = &'a resilab_train::WorkerState>, threshold: f64) -> [usize; 4] {
    let mut c = [0; 4];
    for v in workers.flat_map(|w| w.params.values().flat_map(|t| &t.values)) {
        c[0] += 1;
        if v.is_nan() {
            c[1] += 1;
        } else if v.is_infinite() {
            c[2] += 1;
        } else if f64::from(v.abs()) > threshold {
            c[3] += 1;
        }
    }
    c
}

/// The clean worker file an altered one was made from: the input that `inject`'s log beside it
/// names, else its directory's own `worker-<rank>.h5` when `file` is another file. `None` when
/// neither exists.
pub fn clean_source(file: &Path, rank: usize) -> Option<PathBuf> {
    let lines = resilab_inject::read_log(&resilab_inject::default_log(file)).ok();
    let logged = lines.as_deref().and_then(resilab_inject::log_header).map(|h| PathBuf::from(&h.input));
    let own = file.with_file_name(resilab_checkpoint::file_name(rank));
    [logged, Some(own)].into_iter().flatten().find(|p| p.is_file() && !resilab_inject::same_file(p, file))
}
