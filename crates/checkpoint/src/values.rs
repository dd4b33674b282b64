//! The values a checkpoint holds, read without a model to check them against: what an export
//! to another framework needs, where the model is rebuilt from the stored configuration only to
//! name and order them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use resilab_h5::{Dtype, Reader};
use resilab_models::DatasetPath;
use resilab_train::{HostParamState, HostTensor};

use crate::{Probe, Result, file_name, file_rank, open_current, primary_file};

/// The model and optimizer values of a checkpoint.
#[derive(Clone, Debug, Default)]
pub struct Values {
    /// The worker files read, lowest rank first.
    pub files: Vec<PathBuf>,
    /// The training step the checkpoint holds.
    pub step: u64,
    /// Parameters and buffers by PyTorch-style name.
    pub params: BTreeMap<String, HostTensor>,
    /// Optimizer state by parameter name.
    pub optim: BTreeMap<String, HostParamState>,
    /// BatchNorm `num_batches_tracked` counts an import kept, by the BatchNorm's name
    /// (`layer1.0.bn1`); empty for a checkpoint resilab trained.
    pub batch_counts: BTreeMap<String, u64>,
    /// What fails its stored digest (`file: dataset`, or `file: group@attributes`): values
    /// altered after the checkpoint was written, read as they are.
    pub altered: Vec<String>,
}

/// The worker files of the checkpoint `target` names: `target` itself when it is a file, else
/// every `worker-<rank>.h5` of the checkpoint directory (or of the newest checkpoint in a
/// directory of checkpoints), in rank order.
fn worker_files(target: &Path) -> Result<Vec<PathBuf>> {
    let primary = primary_file(target)?;
    if target.is_file() {
        return Ok(vec![primary]);
    }
    let dir = primary.parent().unwrap_or(Path::new("."));
    let mut files = Vec::new();
    for rank in 0.. {
        let f = dir.join(file_name(rank));
        if !f.is_file() {
            break;
        }
        files.push(f);
    }
    Ok(files)
}

/// Reads every parameter and optimizer buffer of the checkpoint `target` names (see
/// [`worker_files`]), each file checked by `probe` first. A name held by several files
/// (data-parallel replicas) is taken from the lowest rank; pipeline stages hold disjoint names,
/// so their union is the whole model. Every value read is checked against its stored digest,
/// and the root's and each optimizer group's attributes against theirs: what fails is read as
/// it is and listed in [`Values::altered`], for the caller to refuse or report.
pub fn read_values(target: &Path, probe: Probe<'_>) -> Result<Values> {
    let files = worker_files(target)?;
    let mut out = Values::default();
    for (i, file) in files.iter().enumerate() {
        probe(file)?;
        let r = open_current(file)?;
        if i == 0 {
            out.step = r.attr_u64("/", "step")?;
            file_rank(file)?;
        }
        read_file(&r, file, &mut out)?;
    }
    Ok(Values { files, ..out })
}

/// Adds the values of one worker file that `out` does not hold yet.
fn read_file(r: &Reader, file: &Path, out: &mut Values) -> Result<()> {
    let note = |what: &str| format!("{}: {what}", file.display());
    if r.verify_attrs("/")? != Some(true) {
        out.altered.push(note("/@attributes"));
    }
    for d in r.datasets()?.iter().filter(|d| d.dtype == Dtype::F32) {
        match d.path.parse() {
            Ok(DatasetPath::Model(name)) if !out.params.contains_key(&name) => {
                let t = tensor(r, d, file, &mut out.altered)?;
                if let Some(bn) = name.strip_suffix(".running_var") {
                    read_count(r, file, bn, out)?;
                }
                out.params.insert(name, t);
            }
            Ok(DatasetPath::Optimizer { param, buffer }) => read_buffer(r, d, file, param, buffer, out)?,
            _ => {}
        }
    }
    Ok(())
}

/// Adds optimizer buffer `d` (of parameter `name`) unless `out` holds it, with its
/// parameter's step count.
fn read_buffer(r: &Reader, d: &resilab_h5::DatasetInfo, file: &Path, name: String, buffer: String, out: &mut Values) -> Result<()> {
    let note = |what: &str| format!("{}: {what}", file.display());
    if out.optim.get(&name).is_some_and(|s| s.buffers.contains_key(&buffer)) {
        return Ok(());
    }
    let group = DatasetPath::optimizer_group(&name);
    let step = r.attr_u64(&group, "step")?;
    if !out.optim.contains_key(&name) && r.verify_attrs(&group)? != Some(true) {
        out.altered.push(note(&format!("{group}@attributes")));
    }
    let t = tensor(r, d, file, &mut out.altered)?;
    let entry = out.optim.entry(name).or_default();
    entry.step = step;
    entry.buffers.insert(buffer, t);
    Ok(())
}

/// The count an import kept on BatchNorm `bn` (`layer1.0.bn1`, the group
/// `/model/layer1/0/bn1`), if any, noting in [`Values::altered`] a group whose attributes fail
/// their digest.
fn read_count(r: &Reader, file: &Path, bn: &str, out: &mut Values) -> Result<()> {
    let group = DatasetPath::Model(bn.to_string()).absolute();
    if let Some((count, sealed)) = crate::imported::batch_count(r, &group)? {
        if !sealed {
            out.altered.push(format!("{}: {group}@attributes", file.display()));
        }
        out.batch_counts.insert(bn.to_string(), count);
    }
    Ok(())
}

/// Dataset `d`'s values, noting in `altered` when they fail their digest.
fn tensor(r: &Reader, d: &resilab_h5::DatasetInfo, file: &Path, altered: &mut Vec<String>) -> Result<HostTensor> {
    let (values, ok) = r.read_f32_verified(d, &d.shape)?;
    if ok != Some(true) {
        altered.push(format!("{}: {}", file.display(), d.path));
    }
    Ok(HostTensor { shape: d.shape.clone(), values })
}
