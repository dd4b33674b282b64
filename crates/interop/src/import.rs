//! `resilab import`: another framework's weights as a resilab checkpoint.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use resilab_checkpoint::{ForwardPass, ImportNotes, Probe};
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
    /// BatchNorm `num_batches_tracked` counts read and kept in the checkpoint (`export` writes
    /// them back).
    pub batch_counts: usize,
    /// Under `--allow-partial`: what was not imported.
    pub skipped: Vec<String>,
    /// Tensors of a training checkpoint outside its model and optimizer entries.
    pub ignored: Vec<String>,
    /// What the probe showed (`None`: no probe, the forward pass is unverified, and the
    /// checkpoint records so).
    pub probe: Option<crate::probe::Verified>,
    /// The unverified import that `--out` held and this one, with the same weights and a probe,
    /// replaced as verified.
    pub verified_in_place: Option<PathBuf>,
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
            s += &format!("kept {} BatchNorm num_batches_tracked counts (export writes them back)\n", self.batch_counts);
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
            None => "forward pass unverified: save a probe with docs/pytorch/resilab_probe.py and pass --probe FILE to check that resilab computes the module's logits; the checkpoint records this, and inspect, eval and train --resume say so, until the same import with --probe into the same --out verifies it\n".into(),
        };
        if let Some(dir) = &self.verified_in_place {
            s += &format!("{} held this import unverified (the same weights): replaced by the verified one\n", dir.display());
        }
        s
    }
}

/// The destination must be new or empty of checkpoints: an import never replaces one, except
/// an unverified import (its only checkpoint, step 0) that an import with a probe (`probing`)
/// verifies: then that checkpoint's directory.
fn check_out(out: &Path, probing: bool, guard: Probe<'_>) -> Result<Option<PathBuf>> {
    if !out.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        return Ok(None);
    }
    let held = resilab_checkpoint::list(out)?;
    let unverified = match held.as_slice() {
        [] => return Ok(None),
        [(0, dir)] => {
            let file = dir.join(resilab_checkpoint::file_name(0));
            guard(&file)?;
            resilab_checkpoint::forward_pass(&file)?.is_some_and(|f| f.is_unverified()).then(|| dir.clone())
        }
        _ => None,
    };
    match unverified {
        Some(dir) if probing => Ok(Some(dir)),
        Some(_) => Err(Error::Config(format!(
            "{} already holds checkpoints: an unverified import, which the same import with --probe FILE verifies in place; or import into a new or empty directory",
            out.display()
        ))),
        None => Err(Error::Config(format!("{} already holds checkpoints; import into a new or empty directory", out.display()))),
    }
}

/// An unverified import is verified in place only for the weights it holds: every tensor this
/// import fitted must equal the stored one bit for bit.
fn same_weights(dir: &Path, fitted: &Fitted, guard: Probe<'_>) -> Result<()> {
    let held = resilab_checkpoint::read_values(dir, guard)?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let differs = fitted.params.iter().find(|(name, t)| held.params.get(*name).is_none_or(|h| bits(&h.values) != bits(&t.values)));
    match differs {
        None => Ok(()),
        Some((name, _)) => Err(Error::Config(format!(
            "{} holds an unverified import of other weights ({name} differs): a probe verifies the weights it was made with; import into a new or empty directory",
            dir.display()
        ))),
    }
}

/// What the checkpoint records of its forward pass: the probe that verified it, or how it was
/// imported without one.
fn forward_pass(req: &ImportRequest, verified: Option<&crate::probe::Verified>) -> ForwardPass {
    let name = |p: &Path| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned());
    let weights = name(&req.weights);
    match (verified, &req.probe) {
        (Some(v), Some(probe)) => ForwardPass::Verified(format!(
            "probe {} ({} images, logits within {:.1e} of the source model's, largest logit {:.3}) on the import of {weights}",
            name(probe),
            v.images,
            v.largest_difference,
            v.largest_logit
        )),
        _ => ForwardPass::Unverified(format!("of {weights}, by resilab import without --probe")),
    }
}

/// Reads `req.weights`, fits it to the configured model and writes it as step 0 of the
/// configured run. Nothing is written unless every tensor fits (or `allow_partial`).
///
/// Without a probe, the checkpoint records that its forward pass is unverified
/// ([`ForwardPass`]); an import of the same weights with a probe into the same `out` verifies
/// it and replaces it. `guard` checks each existing checkpoint file before it is opened.
pub fn import(req: &ImportRequest, compute: &Compute, guard: Probe<'_>) -> Result<Imported> {
    let cfg = RunConfig::load(&req.config, &req.overrides)?;
    let rules = compile(&cfg.import.rename)?;
    let replacing = check_out(&req.out, req.probe.is_some(), guard)?;
    // Headers only: a tensor's values are read once fitting has matched it to the model, and
    // only as far as the memory budget admits.
    let budget = resilab_limits::memory_budget()?;
    let source = source::open(&req.weights, &budget)?;
    let split = Arc::new(resilab_data::load(&cfg.data).map_err(resilab_runner::Error::from)?);
    let mut trainer = build_trainer(&cfg, split, compute)?;
    let slots = slots(&trainer.model());
    let label = cfg.model.label();
    let mut fitted = fit(&source, &slots, &rules, &label, req.allow_partial)?;
    fit_optimizer(&source, &slots, &rules, cfg.optimizer.buffer_names(), &mut fitted)?;
    if let Some(dir) = &replacing {
        same_weights(dir, &fitted, guard)?;
    }
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
    let notes = ImportNotes { forward_pass: Some(forward_pass(req, probe.as_ref())), batch_counts: fitted.batch_counts.clone() };
    // Claimed and locked only now that everything fits, then checked again under the lock: a
    // second import into the same directory fails at once instead of replacing this one.
    resilab_checkpoint::claim(&req.out, false)?;
    let _lock = resilab_runner::files::lock_dir(&req.out, "--out")?;
    if check_out(&req.out, req.probe.is_some(), guard)? != replacing {
        return Err(Error::Changed { out: req.out.clone() });
    }
    let checkpoint = resilab_checkpoint::save_import(&req.out, &state, &meta, &notes)?;
    let buffers: std::collections::BTreeSet<String> = fitted.optim.values().flat_map(|s| s.buffers.keys().cloned()).collect();
    Ok(Imported {
        checkpoint,
        model: label,
        tensors: fitted.params.len(),
        model_tensors: slots.len(),
        optimizer_params: fitted.optim.len(),
        optimizer_buffers: buffers.into_iter().collect(),
        optimizer_order: fitted.optimizer_order.clone(),
        batch_counts: fitted.batch_counts.len(),
        skipped: fitted.skipped,
        ignored: source.ignored,
        probe,
        verified_in_place: replacing,
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
