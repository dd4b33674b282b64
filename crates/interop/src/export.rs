//! `resilab export`: a checkpoint's model as safetensors under PyTorch's names.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use resilab_checkpoint::Probe;
use resilab_models::{Compute, InputShape};
use resilab_runner::RunConfig;
use safetensors::{Dtype, tensor::TensorView};
use serde::Serialize;

use crate::source::OPTIMIZER_PREFIX;
use crate::{Error, Result, slots};

/// What `resilab export` is asked to do.
#[derive(Clone, Debug)]
pub struct ExportRequest {
    /// A checkpoint directory, a directory of checkpoints (the newest) or a worker file.
    pub checkpoint: PathBuf,
    /// The safetensors file to write (must not exist).
    pub out: PathBuf,
    /// Also write the optimizer's state.
    pub optimizer: bool,
    /// Export values that fail their stored digest (an injected checkpoint) as they are,
    /// instead of refusing them.
    pub allow_altered: bool,
    /// A run configuration whose `[[import.rename]]` rules are undone on every name written,
    /// so the file carries the names of the module the weights were imported from.
    pub renames_from: Option<PathBuf>,
}

/// What an export wrote.
#[derive(Clone, Debug, Serialize)]
pub struct Exported {
    /// The file written.
    pub file: PathBuf,
    /// The model's label.
    pub model: String,
    /// The training step of the checkpoint.
    pub step: u64,
    /// Model tensors written (parameters, buffers and `num_batches_tracked` counts).
    pub tensors: usize,
    /// Optimizer tensors written.
    pub optimizer_tensors: usize,
    /// Bytes written.
    pub bytes: u64,
    /// What failed its stored digest and was exported as it is (with `allow_altered`).
    pub altered: Vec<String>,
}

impl Exported {
    /// The report printed after an export.
    pub fn text(&self) -> String {
        let optim = if self.optimizer_tensors > 0 { format!(" and {} optimizer tensors", self.optimizer_tensors) } else { String::new() };
        let altered = match self.altered.len() {
            0 => String::new(),
            n => format!("of these, {n} failed their stored digest and were exported as they are (altered): {}\n", self.altered.join(", ")),
        };
        format!(
            "exported {} ({} tensors{optim}, step {}) to {} ({} bytes)\n{altered}",
            self.model,
            self.tensors,
            self.step,
            self.file.display(),
            self.bytes
        )
    }
}

/// One tensor to write: name, type, shape and little-endian bytes.
type Entry = (String, Dtype, Vec<usize>, Vec<u8>);

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Writes the checkpoint `req.checkpoint` names as safetensors. The model is rebuilt from the
/// checkpoint's stored configuration to name and check every tensor: a file holding part of
/// the model (a pipeline stage's) is refused. Each BatchNorm gets a `num_batches_tracked` count,
/// so a PyTorch model loads the file with `strict=True`: the count an import kept, else the
/// checkpoint's step (resilab runs one training forward pass per step, which PyTorch counts).
pub fn export(req: &ExportRequest, probe: Probe<'_>) -> Result<Exported> {
    let primary = resilab_checkpoint::primary_file(&req.checkpoint)?;
    probe(&primary)?;
    let meta = resilab_checkpoint::read_meta(&primary)?;
    let cfg = RunConfig::from_stored_toml(&meta.config, &[], &format!("the configuration stored in {}", primary.display()))?;
    let (channels, size, classes) = cfg.data.shape();
    let net = cfg.model.build(InputShape { channels, size }, classes, &Compute::native().device).map_err(resilab_runner::Error::from)?;
    let slots = slots(&net);
    // `primary` has been probed already; the other worker files are probed as they are read.
    let probe_rest = |p: &Path| if p == primary { Ok(()) } else { probe(p) };
    let values = resilab_checkpoint::read_values(&req.checkpoint, &probe_rest)?;
    if !values.altered.is_empty() && !req.allow_altered {
        let shown: Vec<&str> = values.altered.iter().take(4).map(String::as_str).collect();
        let more = if values.altered.len() > 4 { format!(" and {} more", values.altered.len() - 4) } else { String::new() };
        return Err(Error::file(
            &req.checkpoint,
            format!(
                "{} dataset(s) or attribute set(s) fail their stored digest ({}{more}): the checkpoint was altered after it was written; \
                 give --allow-altered to export its values as they are",
                values.altered.len(),
                shown.join(", ")
            ),
        ));
    }
    let renames = match &req.renames_from {
        Some(path) => Some(crate::reverse::Reverse::new(&RunConfig::load(path, &[])?.import.rename)?),
        None => None,
    };
    let mut entries: Vec<Entry> = Vec::new();
    let mut missing = Vec::new();
    for slot in &slots {
        match values.params.get(&slot.name) {
            Some(t) if t.shape == slot.shape => entries.push((slot.name.clone(), Dtype::F32, t.shape.clone(), f32_bytes(&t.values))),
            Some(t) => missing.push(format!("{} is {:?}, the model's {:?}", slot.name, t.shape, slot.shape)),
            None => missing.push(slot.name.clone()),
        }
        if let Some(bn) = slot.name.strip_suffix(".running_var") {
            let kept = values.batch_counts.get(bn).copied();
            let count = i64::try_from(kept.unwrap_or(values.step)).unwrap_or(i64::MAX);
            entries.push((format!("{bn}.num_batches_tracked"), Dtype::I64, Vec::new(), count.to_le_bytes().to_vec()));
        }
    }
    if !missing.is_empty() {
        let files: Vec<String> = values.files.iter().map(|f| f.display().to_string()).collect();
        return Err(Error::file(
            &req.checkpoint,
            format!(
                "holds part of {} only ({} read; missing or misshapen: {}): a pipeline stage's file holds its stage's blocks, so export the checkpoint directory",
                cfg.model.label(),
                files.join(", "),
                missing.join(", ")
            ),
        ));
    }
    if let Some(r) = &renames {
        let names = r.names(entries.iter().map(|e| e.0.as_str()))?;
        for e in &mut entries {
            e.0.clone_from(&names[&e.0]);
        }
    }
    let tensors = entries.len();
    if req.optimizer {
        entries.extend(optimizer_entries(&slots, &values));
    }
    let optimizer_tensors = entries.len() - tensors;
    // One entry: safetensors writes its metadata in a hash map's order, and one entry keeps the
    // file's bytes the same from run to run.
    let what = format!("{} at step {}, exported by resilab {}", cfg.model.label(), values.step, env!("CARGO_PKG_VERSION"));
    let info = HashMap::from([("resilab".to_string(), what)]);
    let bytes = write_new(&req.out, &entries, info)?;
    Ok(Exported {
        file: req.out.clone(),
        model: cfg.model.label(),
        step: values.step,
        tensors,
        optimizer_tensors,
        bytes,
        altered: values.altered,
    })
}

/// The optimizer's buffers as `optimizer.state.<index>.<buffer>`, numbered in `parameters()`
/// order as PyTorch's `optimizer.state_dict()` numbers them; Adam's `step` as a float32 scalar,
/// as PyTorch keeps it.
fn optimizer_entries(slots: &[crate::fit::Slot], values: &resilab_checkpoint::Values) -> Vec<Entry> {
    let mut out = Vec::new();
    for (index, slot) in slots.iter().filter(|s| s.trainable).enumerate() {
        let Some(state) = values.optim.get(&slot.name) else { continue };
        for (buffer, t) in &state.buffers {
            out.push((format!("{OPTIMIZER_PREFIX}{index}.{buffer}"), Dtype::F32, t.shape.clone(), f32_bytes(&t.values)));
        }
        if state.buffers.contains_key("exp_avg") {
            out.push((format!("{OPTIMIZER_PREFIX}{index}.step"), Dtype::F32, Vec::new(), (state.step as f32).to_le_bytes().to_vec()));
        }
    }
    out
}

/// Writes the file under a temporary name beside `out`, fsyncs it and links it into place only
/// if `out` does not exist: an existing file (or link) is never replaced.
fn write_new(out: &Path, entries: &[Entry], info: HashMap<String, String>) -> Result<u64> {
    if out.symlink_metadata().is_ok() {
        return Err(Error::file(out, "exists; resilab will not replace it: choose another --out"));
    }
    let views = entries
        .iter()
        .map(|(name, dtype, shape, bytes)| TensorView::new(*dtype, shape.clone(), bytes).map(|v| (name.clone(), v)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::file(out, format!("cannot be written: {}", resilab_runner::one_line(&e))))?;
    let data = safetensors::tensor::serialize(views, Some(info))
        .map_err(|e| Error::file(out, format!("cannot be written: {}", resilab_runner::one_line(&e))))?;
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let io = |e: std::io::Error| Error::file(out, format!("cannot be written: {e}"));
    // 0666 less the umask, as any file the process creates: a temporary file is 0600 otherwise.
    let mut tmp = tempfile::Builder::new()
        .prefix(".resilab-export.")
        .suffix(".tmp")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(io)?;
    tmp.write_all(&data).and_then(|()| tmp.as_file().sync_all()).map_err(io)?;
    tmp.persist_noclobber(out).map_err(|e| match e.error.kind() {
        std::io::ErrorKind::AlreadyExists => Error::file(out, "exists; resilab will not replace it: choose another --out"),
        _ => io(e.error),
    })?;
    Ok(data.len() as u64)
}
