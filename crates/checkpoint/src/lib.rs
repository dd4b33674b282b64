//! HDF5 checkpoints of the whole training state.
//!
//! A checkpoint is a directory `step-<8 digits>/` holding one file per worker,
//! `worker-<rank>.h5`, each with the same layout (see `docs/checkpoint-format.md`):
//!
//! ```text
//! /model/<parameter path>                      f32, natural shape   (layer1/0/conv1/weight)
//! /optimizer/<parameter path>/<buffer>         f32, parameter shape (momentum_buffer, exp_avg, exp_avg_sq)
//!           <parameter path> group attribute   step (u64)
//! /train_state/{step, epoch, sample, rank, rng_stream, rng_word_pos}   u64 scalars
//! /train_state/rng_seed                        u8[32]
//! /train_state/{loss_scale, growth_tracker}    f32[1], u64 (fp16 runs only: the loss scaler)
//! root attributes: format_version, resilab_version, step, epoch, seed, rank, world_size, arch, config
//! ```
//!
//! Every dataset (tensors and the training state alike) carries an XXH3-64 digest attribute
//! (`xxh3`), and the root's and each optimizer group's attributes (the stored configuration
//! included) are sealed by the digest `attrs_xxh3`, so every byte that drives training is
//! verified on load. Writes are atomic: the files are written into a hidden temporary directory,
//! closed and fsynced, the directory is renamed into place and its parent fsynced, so the newest
//! `step-*` directory is always complete.
//!
//! resilab touches only what it made: a checkpoint directory holds the marker file
//! [`STEP_MARKER`], written before the rename so it is there exactly when the checkpoint is,
//! and the checkpoint root is claimed with [`ROOT_MARKER`] (see [`claim`]). Listing, pruning and
//! replacing consider marked directories only.

pub mod advise;
mod error;
mod imported;
mod policy;
pub mod probe;
mod store;
mod values;

pub use error::{Error, Result};
pub use policy::{CheckpointConfig, OnMismatch};
pub use store::{FORMAT_VERSION, ROOT_MARKER, STEP_MARKER, claim, dir_name, is_checkpoint_dir, list, prune};

use error::{invalid, io};
pub use imported::{BATCH_COUNT_ATTR, FORWARD_PASS_ATTR, ForwardPass, ImportNotes};
use store::{require_regular_file, sync_dir};
pub use values::{Values, read_values};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use resilab_h5::{Dtype, Reader, Writer};
use resilab_models::{DatasetKind, DatasetPath};
use resilab_train::{Cursor, HostParamState, HostTensor, RngState, TrainState, WorkerState};

/// Run-level facts stored as root attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    /// Run seed.
    pub seed: u64,
    /// Model label (e.g. `resnet8`).
    pub arch: String,
    /// The resolved configuration (TOML).
    pub config: String,
}

/// An fp16 run's loss scale (f32, shape `[1]`).
const LOSS_SCALE: &str = "/train_state/loss_scale";
/// An fp16 run's steps without an overflow since its loss scale last changed (u64).
const GROWTH_TRACKER: &str = "/train_state/growth_tracker";

/// The file name of worker `rank`'s checkpoint.
pub fn file_name(rank: usize) -> String {
    format!("worker-{rank}.h5")
}

fn write_worker(path: &Path, w: &WorkerState, step: u64, world: usize, meta: &Meta, notes: &ImportNotes) -> Result<()> {
    let f = Writer::create(path)?;
    // Every tensor in the order written below: their digests are computed meanwhile.
    let slices: Vec<&[f32]> =
        w.params.values().chain(w.optim.values().flat_map(|st| st.buffers.values())).map(|t| t.values.as_slice()).collect();
    resilab_h5::with_digests(&slices, |digests| write_tensors(&f, w, digests))?;
    let word_pos = u64::try_from(w.rng.word_pos)
        .map_err(|_| Error::Invalid { path: path.to_path_buf(), message: "random stream position beyond 2^64 words".into() })?;
    for (k, v) in [
        ("step", step),
        ("epoch", w.cursor.epoch as u64),
        ("sample", w.cursor.sample as u64),
        ("rank", w.rank as u64),
        ("rng_stream", w.rng.stream),
        ("rng_word_pos", word_pos),
    ] {
        f.write_u64(&format!("/train_state/{k}"), v)?;
    }
    f.write_bytes("/train_state/rng_seed", &w.rng.seed)?;
    if let Some(sc) = w.scaler {
        f.write_f32(LOSS_SCALE, &[1], &[sc.scale])?;
        f.write_u64(GROWTH_TRACKER, sc.growth_tracker)?;
    }
    for (k, v) in [
        ("format_version", FORMAT_VERSION),
        ("step", step),
        ("epoch", w.cursor.epoch as u64),
        ("seed", meta.seed),
        ("rank", w.rank as u64),
        ("world_size", world as u64),
    ] {
        f.attr_u64("/", k, v)?;
    }
    f.attr_str("/", "arch", &meta.arch)?;
    f.attr_str("/", "resilab_version", env!("CARGO_PKG_VERSION"))?;
    f.attr_str("/", "config", &meta.config)?;
    imported::write_notes(&f, w, notes)?;
    f.close()?;
    std::fs::File::open(path).and_then(|f| f.sync_all()).map_err(io(path))
}

/// Writes a worker's parameters, then its optimizer state parameter by parameter.
fn write_tensors(f: &Writer, w: &WorkerState, digests: &resilab_h5::Digests<'_>) -> Result<()> {
    for (name, t) in &w.params {
        f.write_f32_digested(&DatasetPath::Model(name.clone()).absolute(), &t.shape, &t.values, digests)?;
    }
    for (name, st) in &w.optim {
        for (buf, t) in &st.buffers {
            let p = DatasetPath::Optimizer { param: name.clone(), buffer: buf.clone() };
            f.write_f32_digested(&p.absolute(), &t.shape, &t.values, digests)?;
        }
        let group = DatasetPath::optimizer_group(name);
        f.attr_u64(&group, "step", st.step)?;
    }
    Ok(())
}

/// Writes `state` as checkpoint `root/step-<step>/` atomically and returns its directory. The
/// root is claimed first ([`claim`], without adopting: a run that adopts a directory claims it
/// itself before its first save). An existing checkpoint of the same step is replaced only if
/// it is a resilab checkpoint; anything else under that name is an error.
pub fn save(root: &Path, state: &TrainState, meta: &Meta) -> Result<PathBuf> {
    claim(root, false)?;
    write_checkpoint(root, state, meta, &ImportNotes::default())
}

/// [`save`] for `resilab import`: the checkpoint also records `notes` (whether the forward
/// pass was verified, the file's BatchNorm counts), which [`forward_pass`] and
/// [`read_values`] read back.
pub fn save_import(root: &Path, state: &TrainState, meta: &Meta, notes: &ImportNotes) -> Result<PathBuf> {
    claim(root, false)?;
    write_checkpoint(root, state, meta, notes)
}

/// [`save`] into a root this run claimed earlier ([`claim`]), which must still hold its marker:
/// a root that was removed (or replaced by a directory that is not a checkpoint root) is an
/// error, never created again, so a run whose directory was taken away writes nothing where it
/// was.
pub fn save_claimed(root: &Path, state: &TrainState, meta: &Meta) -> Result<PathBuf> {
    if !root.join(ROOT_MARKER).symlink_metadata().is_ok_and(|m| m.is_file()) {
        return Err(invalid(
            root,
            format!("is no longer the checkpoint directory this run claimed (no {ROOT_MARKER}): nothing was written"),
        ));
    }
    write_checkpoint(root, state, meta, &ImportNotes::default())
}

fn write_checkpoint(root: &Path, state: &TrainState, meta: &Meta, notes: &ImportNotes) -> Result<PathBuf> {
    let name = dir_name(state.step);
    let dest = root.join(&name);
    if dest.symlink_metadata().is_ok() && !is_checkpoint_dir(&dest) {
        return Err(invalid(&dest, format!("exists and is not a resilab checkpoint (no {STEP_MARKER}); resilab will not replace it")));
    }
    // 0777 less the umask, as any directory the process creates: a temporary one is 0700.
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .tempdir_in(root)
        .map_err(io(root))?;
    store::write_step_marker(tmp.path(), state.step)?;
    for w in &state.workers {
        write_worker(&tmp.path().join(file_name(w.rank)), w, state.step, state.workers.len(), meta, notes)?;
    }
    sync_dir(tmp.path())?;
    if dest.exists() {
        std::fs::remove_dir_all(&dest).map_err(io(&dest))?;
    }
    let tmp = tmp.keep();
    std::fs::rename(&tmp, &dest).map_err(io(&dest))?;
    sync_dir(root)?;
    Ok(dest)
}

/// What loading found.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// The checkpoint directory loaded.
    pub dir: PathBuf,
    /// `file: dataset` entries whose digest did not match (loaded anyway under policy `load`).
    pub mismatched: Vec<String>,
    /// Newer checkpoints skipped under policy `fallback`, with the reason.
    pub skipped: Vec<String>,
    /// A worker file named on its own that is not its directory's `worker-<rank>.h5` (an
    /// injected copy, say): read in place of that file, for its rank.
    pub file: Option<PathBuf>,
    /// For an imported checkpoint, whether its forward pass was verified (see [`forward_pass`]);
    /// set by a caller that asks (`train --resume`), `None` otherwise.
    pub forward_pass: Option<ForwardPass>,
}

/// Reads one worker file, validating every name and shape against `template` (a state of the
/// same model, e.g. a fresh trainer's snapshot) before reading values. Returns the state, the
/// global step it holds, and what fails its digest: datasets by path, attribute sets as
/// `<group>@attributes`. Values that fail their digest are still range-checked by the caller
/// before use ([`resilab_train::Trainer::restore`]).
pub fn read_worker(path: &Path, template: &WorkerState) -> Result<(WorkerState, u64, Vec<String>)> {
    let r = open_current(path)?;
    let datasets = r.datasets()?;
    let infos: BTreeMap<&str, &resilab_h5::DatasetInfo> = datasets.iter().map(|d| (d.path.as_str(), d)).collect();
    let mut mismatched = Vec::new();
    if r.verify_attrs("/")? != Some(true) {
        mismatched.push("/@attributes".to_string());
    }
    let (params, optim) = read_tensors(&r, &datasets, &infos, template, &mut mismatched)?;
    let stray: Vec<&str> = datasets
        .iter()
        .filter(|d| {
            d.dtype == Dtype::F32
                && d.path != LOSS_SCALE
                && !matches!(DatasetKind::of(&d.path), Some((DatasetKind::Model | DatasetKind::Optimizer, _)))
        })
        .map(|d| d.path.as_str())
        .collect();
    if !stray.is_empty() {
        return Err(invalid(path, format!("unexpected datasets: {}", stray.join(", "))));
    }
    let (rank, rng, cursor, step) = read_train_state(&r, &infos, &mut mismatched)?;
    if rank != template.rank {
        return Err(invalid(path, format!("holds rank {rank}, expected {}", template.rank)));
    }
    let scaler = read_scaler(&r, &infos, &mut mismatched)?;
    Ok((WorkerState { rank, params, optim, rng, cursor, scaler }, step, mismatched))
}

type Tensors = (BTreeMap<String, HostTensor>, BTreeMap<String, HostParamState>);

/// The model's parameters and the optimizer's buffers and step counts, each read once with its
/// shape checked first and its digest after.
fn read_tensors(
    r: &Reader,
    datasets: &[resilab_h5::DatasetInfo],
    infos: &BTreeMap<&str, &resilab_h5::DatasetInfo>,
    template: &WorkerState,
    mismatched: &mut Vec<String>,
) -> Result<Tensors> {
    let path = r.path();
    let read = |p: &str, shape: &[usize], mismatched: &mut Vec<String>| -> Result<Vec<f32>> {
        let info = infos.get(p).ok_or_else(|| invalid(path, format!("{p}: missing")))?;
        let (values, ok) = r.read_f32_verified(info, shape)?;
        if ok != Some(true) {
            mismatched.push(p.to_string());
        }
        Ok(values)
    };
    let mut params = BTreeMap::new();
    for (name, t) in &template.params {
        let values = read(&DatasetPath::Model(name.clone()).absolute(), &t.shape, mismatched)?;
        params.insert(name.clone(), HostTensor { shape: t.shape.clone(), values });
    }
    let mut optim: BTreeMap<String, HostParamState> = BTreeMap::new();
    for d in datasets.iter().filter(|d| matches!(DatasetKind::of(&d.path), Some((DatasetKind::Optimizer, _)))) {
        let Ok(DatasetPath::Optimizer { param: name, buffer }) = d.path.parse() else {
            return Err(invalid(path, format!("{}: not /optimizer/<parameter>/<buffer>", d.path)));
        };
        if !resilab_models::OPTIMIZER_STATE_NAMES.contains(&buffer.as_str()) {
            return Err(invalid(path, format!("{}: unknown optimizer buffer {buffer:?}", d.path)));
        }
        let t = template.params.get(&name).ok_or_else(|| invalid(path, format!("{}: no such parameter in the model", d.path)))?;
        let shape = &t.shape;
        let values = read(&d.path, shape, mismatched)?;
        let group = DatasetPath::optimizer_group(&name);
        let entry = optim.entry(name).or_default();
        if entry.buffers.is_empty() {
            entry.step = r.attr_u64(&group, "step")?;
            if r.verify_attrs(&group)? != Some(true) {
                mismatched.push(format!("{group}@attributes"));
            }
        }
        entry.buffers.insert(buffer, HostTensor { shape: shape.clone(), values });
    }
    Ok((params, optim))
}

/// `/train_state/*`: rank, random stream, data cursor and global step, each checked against its
/// digest and converted without overflow.
fn read_train_state(
    r: &Reader,
    infos: &BTreeMap<&str, &resilab_h5::DatasetInfo>,
    mismatched: &mut Vec<String>,
) -> Result<(usize, RngState, Cursor, u64)> {
    let path = r.path();
    let mut u = |k: &str| -> Result<u64> {
        let p = format!("/train_state/{k}");
        let info = infos.get(p.as_str()).ok_or_else(|| invalid(path, format!("{p}: missing")))?;
        let v = r.read_u64(&p)?;
        if info.stored_hash != Some(resilab_h5::digest_u64(v)) {
            mismatched.push(p);
        }
        Ok(v)
    };
    let to_usize = |k: &str, v: u64| -> Result<usize> {
        usize::try_from(v).map_err(|_| invalid(path, format!("/train_state/{k} = {v} is out of range")))
    };
    let rank = to_usize("rank", u("rank")?)?;
    let (stream, word_pos) = (u("rng_stream")?, u("rng_word_pos")?);
    let cursor = Cursor { epoch: to_usize("epoch", u("epoch")?)?, sample: to_usize("sample", u("sample")?)? };
    let step = u("step")?;
    let seed_path = "/train_state/rng_seed";
    let bytes = r.read_bytes(seed_path, 32)?;
    if infos.get(seed_path).and_then(|i| i.stored_hash) != Some(resilab_h5::digest_bytes(&bytes)) {
        mismatched.push(seed_path.to_string());
    }
    let seed: [u8; 32] = bytes.try_into().map_err(|_| invalid(path, "/train_state/rng_seed: expected 32 bytes"))?;
    Ok((rank, RngState { seed, stream, word_pos: u128::from(word_pos) }, cursor, step))
}

/// An fp16 run's loss scaler (`None` when the file holds none): both datasets or neither, the
/// scale a positive finite number.
fn read_scaler(
    r: &Reader,
    infos: &BTreeMap<&str, &resilab_h5::DatasetInfo>,
    mismatched: &mut Vec<String>,
) -> Result<Option<resilab_train::ScalerState>> {
    let path = r.path();
    let (scale, tracker) = match (infos.get(LOSS_SCALE), infos.get(GROWTH_TRACKER)) {
        (None, None) => return Ok(None),
        (Some(s), Some(t)) => (s, t),
        _ => return Err(invalid(path, format!("holds one of {LOSS_SCALE} and {GROWTH_TRACKER} without the other"))),
    };
    let (values, ok) = r.read_f32_verified(scale, &[1])?;
    if ok != Some(true) {
        mismatched.push(LOSS_SCALE.to_string());
    }
    let growth_tracker = r.read_u64(GROWTH_TRACKER)?;
    if tracker.stored_hash != Some(resilab_h5::digest_u64(growth_tracker)) {
        mismatched.push(GROWTH_TRACKER.to_string());
    }
    let scale = values[0];
    if !(scale.is_finite() && scale > 0.0) {
        return Err(invalid(path, format!("{LOSS_SCALE} = {scale} is not a positive finite number")));
    }
    Ok(Some(resilab_train::ScalerState { scale, growth_tracker }))
}

/// A check run on each file before it is opened in this process. The HDF5 C library can crash
/// or hang on some corrupt headers; a probe that opens the file in a child process first (see
/// `resilab`'s binary) turns that into an error. [`no_probe`] trusts the file.
pub type Probe<'a> = &'a dyn Fn(&Path) -> Result<()>;

/// A [`Probe`] that accepts every file.
pub fn no_probe(_: &Path) -> Result<()> {
    Ok(())
}

/// Loads checkpoint directory `dir` for a trainer whose current state is `template`.
pub fn load_dir(dir: &Path, template: &TrainState, policy: OnMismatch, probe: Probe<'_>) -> Result<(TrainState, LoadReport)> {
    load_dir_with(dir, None, template, policy, probe, false)
}

/// [`load_dir`], with `(rank, file)` read in place of that rank's `worker-<rank>.h5`; with
/// `fewer`, a checkpoint of more workers than the template's loads the template's ranks.
fn load_dir_with(
    dir: &Path,
    instead: Option<(usize, &Path)>,
    template: &TrainState,
    policy: OnMismatch,
    probe: Probe<'_>,
    fewer: bool,
) -> Result<(TrainState, LoadReport)> {
    let mut workers = Vec::new();
    let mut report = LoadReport { dir: dir.to_path_buf(), file: instead.map(|(_, f)| f.to_path_buf()), ..Default::default() };
    let mut step = None;
    for t in &template.workers {
        let path = match instead {
            Some((rank, file)) if rank == t.rank => file.to_path_buf(),
            _ => dir.join(file_name(t.rank)),
        };
        if !path.exists() {
            let n = template.workers.len();
            let shown = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
            return Err(match instead {
                // A worker file named on its own reads its checkpoint's other ranks beside it.
                Some((_, file)) => invalid(
                    file,
                    format!(
                        "is one worker's file; this run has {n} worker(s), whose other files are read from its directory {}, which has no {}",
                        shown.display(),
                        file_name(t.rank)
                    ),
                ),
                None => invalid(&shown, format!("missing {} (a checkpoint of {n} worker(s) is expected)", file_name(t.rank))),
            });
        }
        probe(&path)?;
        let world = Reader::open(&path)?.attr_u64("/", "world_size")?;
        let n = template.workers.len() as u64;
        if world != n && !(fewer && world > n) {
            return Err(invalid(
                &path,
                format!("was written by {world} worker(s) or stage(s); this run has {} (check [parallel])", template.workers.len()),
            ));
        }
        let (w, s, bad) = read_worker(&path, t)?;
        if !bad.is_empty() && policy != OnMismatch::Load {
            return Err(Error::Mismatch { path, datasets: bad });
        }
        report.mismatched.extend(bad.into_iter().map(|d| format!("{}: {d}", path.display())));
        if step.is_some_and(|x| x != s) {
            return Err(invalid(dir, "worker files hold different steps"));
        }
        step = Some(s);
        workers.push(w);
    }
    Ok((TrainState { step: step.unwrap_or(0), workers }, report))
}

/// Loads what `target` names: a checkpoint directory (`step-*`), a worker file inside one, or a
/// directory of checkpoints (the newest is used). Under `fallback`, checkpoints that fail to load
/// or verify are skipped in favour of the next older one.
pub fn load(target: &Path, template: &TrainState, policy: OnMismatch, probe: Probe<'_>) -> Result<(TrainState, LoadReport)> {
    if target.is_file() {
        return load_file(target, template, policy, probe);
    }
    let target = target.to_path_buf();
    if !target.exists() {
        return Err(invalid(&target, "no such checkpoint"));
    }
    let candidates: Vec<PathBuf> =
        if target.join(file_name(0)).exists() { vec![target.clone()] } else { list(&target)?.into_iter().rev().map(|(_, p)| p).collect() };
    if candidates.is_empty() {
        return Err(invalid(&target, "no checkpoint here (expected step-*/worker-*.h5)"));
    }
    load_first(&target, &candidates, template, policy, probe, false)
}

/// Loads the checkpoint a worker file belongs to. The file itself is read for its rank (the
/// `rank` attribute it stores), never a sibling in its place: `worker-<rank>.h5` is its
/// directory's own file, and any other name (an injected copy beside it) stands in for that
/// rank's file while the other ranks come from their own files in the directory.
fn load_file(file: &Path, template: &TrainState, policy: OnMismatch, probe: Probe<'_>) -> Result<(TrainState, LoadReport)> {
    let dir = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    probe(file)?;
    let rank = file_rank(file)?;
    if template.workers.iter().all(|t| t.rank != rank) {
        return Err(invalid(
            file,
            format!("holds rank {rank}, but this run has {} worker(s) or stage(s) (check [parallel])", template.workers.len()),
        ));
    }
    let own = file.file_name().is_some_and(|n| n == file_name(rank).as_str());
    let probe_rest = |p: &Path| if p == file { Ok(()) } else { probe(p) };
    load_dir_with(dir, (!own).then_some((rank, file)), template, policy, &probe_rest, false)
}

/// Opens a worker file, refusing an HDF5 file that resilab did not write as a checkpoint (no
/// `format_version` root attribute) with that said, rather than the first attribute or digest it
/// lacks.
pub(crate) fn open_checkpoint(path: &Path) -> Result<Reader> {
    let r = Reader::open(path)?;
    if !r.attr_names("/")?.iter().any(|a| a == "format_version") {
        return Err(invalid(
            path,
            "is an HDF5 file but not a resilab checkpoint (it has no format_version attribute): resilab reads the worker files it wrote, step-*/worker-<rank>.h5",
        ));
    }
    Ok(r)
}

/// [`open_checkpoint`], refusing a file of another layout version than [`FORMAT_VERSION`].
pub(crate) fn open_current(path: &Path) -> Result<Reader> {
    let r = open_checkpoint(path)?;
    let version = r.attr_u64("/", "format_version")?;
    if version != FORMAT_VERSION {
        return Err(invalid(path, format!("format_version {version}, this resilab reads {FORMAT_VERSION}")));
    }
    Ok(r)
}

/// The rank (worker or stage) a worker file was written by.
pub fn file_rank(file: &Path) -> Result<usize> {
    let rank = open_checkpoint(file)?.attr_u64("/", "rank")?;
    usize::try_from(rank).map_err(|_| invalid(file, format!("rank {rank} is out of range")))
}

/// Loads the newest checkpoint in the directory of checkpoints `root` taken before step
/// `before` (older ones when it fails to verify, under `fallback`). `Ok(None)` when there is
/// none: the caller decides whether the initial state will do.
pub fn load_before(
    root: &Path,
    before: u64,
    template: &TrainState,
    policy: OnMismatch,
    probe: Probe<'_>,
) -> Result<Option<(TrainState, LoadReport)>> {
    load_older(root, before, template, policy, probe, false)
}

fn load_older(
    root: &Path,
    before: u64,
    template: &TrainState,
    policy: OnMismatch,
    probe: Probe<'_>,
    fewer: bool,
) -> Result<Option<(TrainState, LoadReport)>> {
    let candidates: Vec<PathBuf> = list(root)?.into_iter().rev().filter(|(s, _)| *s < before).map(|(_, p)| p).collect();
    if candidates.is_empty() {
        return Ok(None);
    }
    load_first(root, &candidates, template, policy, probe, fewer).map(Some)
}

/// [`load_before`] for a data-parallel job that lost workers for good and went on with fewer:
/// a checkpoint written before the loss, by more workers, loads the ranks the job has now
/// (replicas hold the same model; each rank reads its own file).
pub fn load_replicas_before(
    root: &Path,
    before: u64,
    template: &TrainState,
    policy: OnMismatch,
    probe: Probe<'_>,
) -> Result<Option<(TrainState, LoadReport)>> {
    load_older(root, before, template, policy, probe, true)
}

/// The first of `candidates` (newest first) that loads; under `fallback`, those that fail are
/// skipped and named in the report.
fn load_first(
    target: &Path,
    candidates: &[PathBuf],
    template: &TrainState,
    policy: OnMismatch,
    probe: Probe<'_>,
    fewer: bool,
) -> Result<(TrainState, LoadReport)> {
    let mut skipped = Vec::new();
    for (i, dir) in candidates.iter().enumerate() {
        match load_dir_with(dir, None, template, policy, probe, fewer) {
            Ok((state, mut report)) => {
                report.skipped = skipped;
                return Ok((state, report));
            }
            Err(e) if policy == OnMismatch::Fallback && i + 1 < candidates.len() => skipped.push(format!("{}: {e}", dir.display())),
            Err(e) => return Err(e),
        }
    }
    Err(invalid(target, format!("no checkpoint verifies: {}", skipped.join("; "))))
}

/// The worker file `target` names for run-level facts: `target` itself when it is a file,
/// `worker-0.h5` of a checkpoint directory, or that of the newest checkpoint in a directory of
/// checkpoints.
pub fn primary_file(target: &Path) -> Result<PathBuf> {
    if target.is_file() {
        return Ok(target.to_path_buf());
    }
    if !target.exists() {
        return Err(invalid(target, "no such checkpoint"));
    }
    if target.join(file_name(0)).exists() {
        return Ok(target.join(file_name(0)));
    }
    match list(target)?.pop() {
        Some((_, dir)) => Ok(dir.join(file_name(0))),
        None => Err(invalid(target, "no checkpoint here (expected step-*/worker-*.h5)")),
    }
}

/// Reads a checkpoint file's run-level facts: seed, model label and the resolved configuration
/// the run was started with.
///
/// These facts decide what a checkpoint is evaluated or continued with, so they must pass the
/// root attributes' digest: an altered configuration is an error, never silently used.
pub fn read_meta(file: &Path) -> Result<Meta> {
    let r = open_checkpoint(file)?;
    if r.verify_attrs("/")? != Some(true) {
        return Err(Error::Mismatch {
            path: file.to_path_buf(),
            datasets: vec!["/@attributes (the stored configuration, seed and model)".into()],
        });
    }
    Ok(Meta { seed: r.attr_u64("/", "seed")?, arch: r.attr_str("/", "arch")?, config: r.attr_str("/", "config")? })
}

/// What the worker file `file` records of its forward pass: `None` for a checkpoint that is no
/// import (see [`ForwardPass`]). A `verified` record whose root attributes fail their digest
/// counts as unverified.
pub fn forward_pass(file: &Path) -> Result<Option<ForwardPass>> {
    imported::read_forward_pass(&open_checkpoint(file)?)
}

/// One dataset as `resilab inspect` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct InspectedDataset {
    /// Path, shape, type and stored digest.
    #[serde(flatten)]
    pub info: resilab_h5::DatasetInfo,
    /// `ok`, `MISMATCH`, `no-hash`, or `unreadable: <reason>`.
    pub hash_status: String,
}

/// What a checkpoint file holds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Inspection {
    /// The file.
    pub file: PathBuf,
    /// Root attributes, as text.
    pub attributes: BTreeMap<String, String>,
    /// Digest status of the root attributes (`ok`, `MISMATCH`, `no-hash`).
    pub attributes_status: String,
    /// Every dataset.
    pub datasets: Vec<InspectedDataset>,
    /// For an imported checkpoint, whether its forward pass was verified (`None`: no import).
    pub forward_pass: Option<ForwardPass>,
}

impl Inspection {
    /// `resilab inspect`'s listing: the root attributes (a multi-line value as its line count),
    /// their digest status, one line per dataset, and the count failing their digest. Names and
    /// values read from the file show their control characters as escapes
    /// ([`resilab_text::terminal`]).
    pub fn text(&self) -> String {
        use resilab_text::terminal;
        let mut lines = vec![self.file.display().to_string()];
        for (k, v) in &self.attributes {
            let v = if v.contains('\n') { format!("<{} lines>", v.lines().count()) } else { terminal(v).into_owned() };
            lines.push(format!("  @{} = {v}", terminal(k)));
        }
        lines.push(format!("  attributes digest: {}", self.attributes_status));
        lines.push(format!("{:<60} {:>16} {:>6} hash", "dataset", "shape", "dtype"));
        for d in &self.datasets {
            let shape = format!("{:?}", d.info.shape);
            lines.push(format!(
                "{:<60} {:>16} {:>6} {}",
                terminal(&d.info.path),
                shape,
                d.info.dtype.to_string(),
                terminal(&d.hash_status)
            ));
        }
        let bad = self.datasets.iter().filter(|d| d.hash_status != "ok" && d.hash_status != "no-hash").count();
        let fine = ["ok", "no-hash"].contains(&self.attributes_status.as_str());
        let attrs = if fine { "" } else { "; the root attributes fail theirs" };
        lines.push(format!("{} datasets, {} failing their digest{attrs}", self.datasets.len(), bad));
        lines.join("\n") + "\n"
    }
}

/// Lists a checkpoint file's attributes and datasets, verifying each dataset's digest.
/// `target` may be a worker file or a checkpoint directory (its `worker-0.h5`).
pub fn inspect(target: &Path) -> Result<Inspection> {
    let file = if target.is_dir() { target.join(file_name(0)) } else { target.to_path_buf() };
    require_regular_file(&file)?;
    let r = Reader::open(&file)?;
    let mut attributes = BTreeMap::new();
    for name in r.attr_names("/")? {
        let value = r.attr_value("/", &name).map_or_else(|e| format!("<unreadable: {e}>"), |v| v.to_string());
        attributes.insert(name, value);
    }
    let attributes_status = match r.verify_attrs("/") {
        Ok(Some(true)) => "ok".to_string(),
        Ok(Some(false)) => "MISMATCH".to_string(),
        Ok(None) => "no-hash".to_string(),
        Err(e) => format!("unreadable: {e}"),
    };
    let datasets = r
        .datasets()?
        .into_iter()
        .map(|info| {
            let hash_status = match r.verify(&info) {
                Ok(Some(true)) => "ok".to_string(),
                Ok(Some(false)) => "MISMATCH".to_string(),
                Ok(None) => "no-hash".to_string(),
                Err(e) => format!("unreadable: {e}"),
            };
            InspectedDataset { info, hash_status }
        })
        .collect();
    let sealed = attributes_status == "ok";
    let forward_pass = attributes.get(FORWARD_PASS_ATTR).map(|text| imported::recorded(text, sealed));
    Ok(Inspection { file, attributes, attributes_status, datasets, forward_pass })
}
