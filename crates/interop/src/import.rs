//! `resilab import`: another framework's weights as a resilab checkpoint.

use std::path::PathBuf;
use std::sync::Arc;

use resilab_models::Compute;
use resilab_runner::{RunConfig, build_trainer};
use resilab_train::TrainState;
use serde::Serialize;

use crate::fit::{Fitted, compile, fit, fit_optimizer};
use crate::{Error, Result, slots, source};

/// What `resilab import` is asked to do.
#[derive(Clone, Debug)]
pub struct ImportRequest {
    /// The weights: `.pt`/`.pth` or `.safetensors`.
    pub weights: PathBuf,
    /// The run configuration the checkpoint is for (model, data, optimizer, `[import]`).
    pub config: PathBuf,
    /// `key=value` overrides of the configuration.
    pub overrides: Vec<String>,
    /// The checkpoint directory to write (new or empty).
    pub out: PathBuf,
    /// Import what fits and keep the configured initialisation for the rest.
    pub allow_partial: bool,
    /// A probe (`docs/pytorch/resilab_probe.py`): the import is refused unless resilab's
    /// forward pass gives the probe's logits.
    pub probe: Option<PathBuf>,
}

/// What an import wrote.
#[derive(Clone, Debug, Serialize)]
pub struct Imported {
    /// The checkpoint directory written (`<out>/step-00000000`).
    pub checkpoint: PathBuf,
    /// The model's label.
    pub model: String,
    /// Parameters and buffers imported, of the model's.
    pub tensors: usize,
    /// The model's parameters and buffers.
    pub model_tensors: usize,
    /// Parameters that also received optimizer state.
    pub optimizer_params: usize,
    /// The optimizer buffers imported (`momentum_buffer`, or `exp_avg` and `exp_avg_sq`).
    pub optimizer_buffers: Vec<String>,
    /// Which order numbered the optimizer's state (docs/pytorch.md).
    pub optimizer_order: Option<String>,
    /// BatchNorm `num_batches_tracked` counts read and dropped.
    pub batch_counts: usize,
    /// Under `--allow-partial`: what was not imported.
    pub skipped: Vec<String>,
    /// Tensors of a training checkpoint outside its model and optimizer entries.
    pub ignored: Vec<String>,
    /// What the probe showed (`None`: no probe, the forward pass is unverified).
    pub probe: Option<crate::probe::Verified>,
}

impl Imported {
    /// The report printed after an import.
    pub fn text(&self) -> String {
        let mut s =
            format!("imported {} of {} tensors of {} into {}\n", self.tensors, self.model_tensors, self.model, self.checkpoint.display());
        if self.optimizer_params > 0 {
            let order = self.optimizer_order.as_deref().map_or(String::new(), |o| format!(", numbered in {o}"));
            s += &format!("optimizer state: {} for {} parameters{order}\n", self.optimizer_buffers.join(", "), self.optimizer_params);
        }
        if self.batch_counts > 0 {
            s += &format!("dropped {} BatchNorm num_batches_tracked counts (resilab keeps none)\n", self.batch_counts);
        }
        for skip in &self.skipped {
            s += &format!("not imported (--allow-partial): {skip}\n");
        }
        if !self.ignored.is_empty() {
            s += &format!("left alone: {}\n", self.ignored.join(", "));
        }
        s += &match &self.probe {
            Some(p) => format!(
                "forward pass verified: on the probe's {} images resilab's logits are within {:.1e} of PyTorch's (largest logit {:.3})\n",
                p.images, p.largest_difference, p.largest_logit
            ),
            None => "forward pass unverified: save a probe with docs/pytorch/resilab_probe.py and pass --probe FILE to check that resilab computes the module's logits\n".into(),
        };
        s
    }
}

/// The destination must be new or empty of checkpoints: an import never replaces one.
fn check_out(out: &std::path::Path) -> Result<()> {
    if out.symlink_metadata().is_ok_and(|m| m.is_dir()) && !resilab_checkpoint::list(out)?.is_empty() {
        return Err(Error::Config(format!("{} already holds checkpoints; import into a new or empty directory", out.display())));
    }
    Ok(())
}

/// Reads `req.weights`, fits it to the configured model and writes it as step 0 of the
/// configured run. Nothing is written unless every tensor fits (or `allow_partial`).
pub fn import(req: &ImportRequest, compute: &Compute) -> Result<Imported> {
    let cfg = RunConfig::load(&req.config, &req.overrides)?;
    let rules = compile(&cfg.import.rename)?;
    check_out(&req.out)?;
    // Headers only: a tensor's values are read once fitting has matched it to the model, and
    // only as far as the memory budget admits.
    let budget = resilab_limits::memory_budget().map_err(Error::Config)?;
    let source = source::open(&req.weights, &budget)?;
    let split = Arc::new(resilab_data::load(&cfg.data).map_err(resilab_runner::Error::from)?);
    let mut trainer = build_trainer(&cfg, split, compute)?;
    let slots = slots(&trainer.model());
    let label = cfg.model.label();
    let mut fitted = fit(&source, &slots, &rules, &label, req.allow_partial)?;
    fit_optimizer(&source, &slots, &rules, cfg.optimizer.buffer_names(), &mut fitted)?;
    let state = place(trainer.snapshot(), &fitted);
    // The trainer checks every name, shape and counter before anything is written.
    trainer.restore(&state).map_err(resilab_runner::Error::from)?;
    check_normalize(&cfg, &req.config)?;
    let probe = match &req.probe {
        Some(path) => {
            let (channels, size, classes) = (trainer.data.train.channels, trainer.data.train.size, trainer.data.train.classes);
            Some(crate::probe::check(path, &trainer.model(), &label, &trainer.data.norm, (channels, size), classes, &compute.device)?)
        }
        None => None,
    };
    let meta = resilab_checkpoint::Meta { seed: cfg.seed, arch: label.clone(), config: cfg.to_toml() };
    // Claimed and locked only now that everything fits, then checked again under the lock: a
    // second import into the same directory fails at once instead of replacing this one.
    resilab_checkpoint::claim(&req.out, false)?;
    let _lock = resilab_runner::files::lock_dir(&req.out, "--out")?;
    check_out(&req.out)?;
    let checkpoint = resilab_checkpoint::save(&req.out, &state, &meta)?;
    let buffers: std::collections::BTreeSet<String> = fitted.optim.values().flat_map(|s| s.buffers.keys().cloned()).collect();
    Ok(Imported {
        checkpoint,
        model: label,
        tensors: fitted.params.len(),
        model_tensors: slots.len(),
        optimizer_params: fitted.optim.len(),
        optimizer_buffers: buffers.into_iter().collect(),
        optimizer_order: fitted.optimizer_order.clone(),
        batch_counts: fitted.batch_counts,
        skipped: fitted.skipped,
        ignored: source.ignored,
        probe,
    })
}

/// An import without `data.normalize` would evaluate and train the PyTorch model on inputs
/// normalised as it never saw them: refused, naming both choices.
fn check_normalize(cfg: &RunConfig, path: &std::path::Path) -> Result<()> {
    if cfg.data.normalize.is_some() {
        return Ok(());
    }
    Err(Error::Config(format!(
        "{}: data.normalize is not set. Set it to the normalisation the PyTorch model was trained with, data.normalize = {{ mean = [...], std = [...] }} on pixels scaled to [0, 1] as torchvision's Normalize takes it; or normalize = \"dataset\" to use this training set's statistics knowingly",
        path.display()
    )))
}

/// The fresh run's state with the imported values in every worker that holds them (each
/// data-parallel replica; the pipeline stage that holds the parameter).
fn place(mut state: TrainState, fitted: &Fitted) -> TrainState {
    for w in &mut state.workers {
        for (name, t) in &mut w.params {
            if let Some(v) = fitted.params.get(name) {
                *t = v.clone();
            }
            if let Some(st) = fitted.optim.get(name) {
                w.optim.insert(name.clone(), st.clone());
            }
        }
    }
    state
}
