//! Injection into HDF5 files: plan everything from the untouched input, then write the result
//! to a staged copy that replaces the output atomically. A failure at any point leaves the input
//! and any previous output as they were.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use resilab_h5::{Editor, Reader};
use serde::{Deserialize, Serialize};

use crate::bytes::{self, ByteRecord};
use crate::config::{Spec, TargetKind, location_matches};
use crate::model::{self, Flip};
use crate::run::{self, Outcome, Plan, Record, Summary, Target, Values};
use crate::{Error, Result};

/// Where the corrupted file goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// A new file (replaced atomically if it exists); the input is never written.
    Copy(PathBuf),
    /// The input itself, replaced atomically.
    InPlace,
}

/// The first line of a log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Version of resilab that wrote the log.
    pub resilab_version: String,
    /// The file read.
    pub input: String,
    /// The file written.
    pub output: String,
    /// Seed of the draws (`null` for a replay).
    pub seed: Option<u64>,
    /// `values`, `bytes` or `replay`.
    pub target: String,
    /// The fault model, in words.
    pub model: String,
    /// Probability that an attempt corrupts.
    pub probability: f64,
    /// Attempts made.
    pub attempts: u64,
    /// `per_tensor` or `per_element` (values), or the byte region.
    pub sampling: String,
    /// Datasets attempts could hit.
    pub candidates: Vec<String>,
    /// Elements (bytes in byte mode) in the file.
    pub total_elements: u64,
    /// Config keys accepted but not acted on.
    pub ignored: Vec<String>,
    /// Datasets the config targets whose values could not be read, left out of the candidates
    /// (only with [`Unreadable::Skip`]; otherwise they are an error).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

/// What an injection does with datasets it would target whose values it cannot read (a type
/// other than integers and 16/32/64-bit floats: compound, string, enum, opaque, 128-bit
/// floats, a type the HDF5 library cannot describe).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unreadable {
    /// Refuse the file, naming them.
    #[default]
    Refuse,
    /// Leave them out of the candidates; the log's header names them.
    Skip,
}

/// How many datasets an error or a warning names before it counts the rest (the log's header
/// names all of them).
const NAMED: usize = 20;

/// `names`, quoted (control characters escaped) and cut after [`NAMED`], for one line.
fn name_list(names: &[String]) -> String {
    let mut text = names.iter().take(NAMED).map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ");
    if names.len() > NAMED {
        text.push_str(&format!(" and {} more", names.len() - NAMED));
    }
    text
}

/// The warning for datasets left out under [`Unreadable::Skip`] (none when there are none).
pub fn skipped_warnings(unreadable: &[String]) -> Option<String> {
    (!unreadable.is_empty()).then(|| {
        format!(
            "left out {} dataset(s) whose values resilab cannot read (--skip-unreadable; the log's header lists them): {}",
            unreadable.len(),
            name_list(unreadable)
        )
    })
}

/// One line of a log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LogLine {
    /// What was run.
    Header(Header),
    /// One value attempt.
    Attempt(Record),
    /// One byte attempt.
    ByteAttempt(ByteRecord),
    /// Totals.
    Summary(Summary),
}

/// [`LogLine`] by reference, for writing without copies.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum LineRef<'a> {
    Header(&'a Header),
    Attempt(&'a Record),
    ByteAttempt(&'a ByteRecord),
    Summary(&'a Summary),
}

/// What an injection did.
#[derive(Clone, Debug)]
pub struct Report {
    /// The log's first line.
    pub header: Header,
    /// Value attempts.
    pub records: Vec<Record>,
    /// Byte attempts.
    pub byte_records: Vec<ByteRecord>,
    /// Totals.
    pub summary: Summary,
    /// The file written.
    pub output: PathBuf,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |error| Error::Io { path: path.to_path_buf(), error }
}

fn existing(input: &Path) -> Result<()> {
    match std::fs::metadata(input) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(Error::Path { path: input.to_path_buf(), message: "is not a file".into() }),
        Err(error) => Err(Error::Io { path: input.to_path_buf(), error }),
    }
}

/// The datasets `spec` would target (those its locations match, or all) whose values cannot
/// be read as numbers: an error naming them under [`Unreadable::Refuse`], else their paths.
pub fn unreadable(reader: &Reader, spec: &Spec, policy: Unreadable) -> Result<Vec<String>> {
    let targeted = |path: &str| spec.locations.as_ref().is_none_or(|locations| locations.iter().any(|l| location_matches(l, path)));
    let found: Vec<String> =
        reader.datasets()?.into_iter().filter(|d| !d.dtype.is_numeric() && !d.is_empty() && targeted(&d.path)).map(|d| d.path).collect();
    if found.is_empty() || policy == Unreadable::Skip {
        return Ok(found);
    }
    Err(Error::Unreadable {
        file: reader.path().to_path_buf(),
        message: format!(
            "resilab cannot read the values of {} dataset(s) the config targets (their type is not an integer or a 16/32/64-bit float): {}. Pass --skip-unreadable to corrupt the other datasets and leave these out",
            found.len(),
            name_list(&found)
        ),
    })
}

/// The datasets a spec may hit in a file, and the file's element count.
pub fn targets(reader: &Reader, spec: &Spec) -> Result<(Vec<Target>, u64)> {
    let infos = reader.datasets()?;
    let total: u64 = infos.iter().filter(|d| d.dtype.is_numeric()).map(|d| d.len() as u64).sum();
    let usable = |d: &&resilab_h5::DatasetInfo| d.dtype.is_numeric() && !d.is_empty();
    let chosen: Vec<&resilab_h5::DatasetInfo> = match &spec.locations {
        None => infos.iter().filter(usable).collect(),
        Some(locations) => {
            for loc in locations {
                let hits: Vec<_> = infos.iter().filter(|d| location_matches(loc, &d.path)).collect();
                if hits.is_empty() {
                    let examples: Vec<&str> = infos.iter().take(4).map(|d| d.path.as_str()).collect();
                    return Err(Error::Location {
                        location: loc.clone(),
                        file: reader.path().to_path_buf(),
                        message: format!("matches no dataset (paths look like {})", examples.join(", ")),
                    });
                }
                if !hits.iter().any(usable) {
                    return Err(Error::Location {
                        location: loc.clone(),
                        file: reader.path().to_path_buf(),
                        message: "matches only datasets that are empty or not numbers".into(),
                    });
                }
            }
            infos.iter().filter(usable).filter(|d| locations.iter().any(|l| location_matches(l, &d.path))).collect()
        }
    };
    if chosen.is_empty() {
        return Err(Error::Location {
            location: "/".into(),
            file: reader.path().to_path_buf(),
            message: "the file holds no number datasets to corrupt".into(),
        });
    }
    for d in &chosen {
        if d.dtype.is_float() {
            let p = spec.model.precision.bits_for(d.dtype);
            spec.model.check_width(p).map_err(|m| Error::Location {
                location: d.path.clone(),
                file: reader.path().to_path_buf(),
                message: format!("{} dataset: {m}", d.dtype),
            })?;
        }
    }
    let targets = chosen.into_iter().map(|d| Target { path: d.path.clone(), dtype: d.dtype, len: d.len() }).collect();
    Ok((targets, total))
}

const STAGED_COPY: &str = "inject";
const STAGED_LOG: &str = "log";

/// The name prefix of what process `pid` stages: `.resilab-<kind>-<pid>-`.
fn staged_prefix(kind: &str, pid: u32) -> String {
    format!(".resilab-{kind}-{pid}-")
}

/// Removes from `dir` the staged copies and logs that process `pid` left behind (a process that
/// crashed cannot remove its own); returns how many were removed.
pub fn remove_staged(dir: &Path, pid: u32) -> usize {
    let prefixes = [staged_prefix(STAGED_COPY, pid), staged_prefix(STAGED_LOG, pid)];
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if prefixes.iter().any(|p| name.starts_with(p.as_str()))
            && e.file_type().is_ok_and(|t| t.is_file())
            && std::fs::remove_file(e.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

/// A changed copy written beside its output and not yet renamed over it. Dropping it removes
/// the copy and leaves the output as it was.
pub struct Staged {
    tmp: tempfile::NamedTempFile,
    output: PathBuf,
    durable: bool,
}

impl Staged {
    /// Renames the copy over the output (fsyncing the copy and the directory first when the
    /// output is the input, so the original is never lost).
    pub fn commit(self) -> Result<()> {
        let Staged { tmp, output, durable } = self;
        if durable {
            tmp.as_file().sync_all().map_err(io(tmp.path()))?;
        }
        tmp.persist(&output).map_err(|e| Error::Io { path: output.clone(), error: e.error })?;
        if durable && let Ok(d) = std::fs::File::open(parent_dir(&output)) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Copies `input` to a hidden file beside `output` and lets `edit` change it; [`Staged::commit`]
/// then renames it over `output`, so a killed run leaves either the old output or the complete
/// new one, never a partial file, and a failure before the commit leaves nothing behind.
///
/// When the output is the input (`--in-place`) the commit fsyncs the copy before the rename. A
/// separate copy is not synced: it can be remade from the log, and syncing 90 MB would triple
/// the cost of a small injection. The copy goes through the staged file's own descriptor (no
/// truncation), which keeps ext4 from flushing it on close.
fn stage(input: &Path, output: &Path, durable: bool, edit: impl FnOnce(&Path) -> Result<()>) -> Result<Staged> {
    let dir = parent_dir(output);
    let mut tmp = tempfile::Builder::new()
        .prefix(&staged_prefix(STAGED_COPY, std::process::id()))
        .suffix(".h5.tmp")
        .tempfile_in(&dir)
        .map_err(io(&dir))?;
    let mut src = std::fs::File::open(input).map_err(io(input))?;
    std::io::copy(&mut src, tmp.as_file_mut()).map_err(io(tmp.path()))?;
    drop(src);
    let permissions = std::fs::metadata(input).map_err(io(input))?.permissions();
    tmp.as_file().set_permissions(permissions).map_err(io(tmp.path()))?;
    edit(tmp.path())?;
    Ok(Staged { tmp, output: output.to_path_buf(), durable })
}

/// An injection done into a staged copy: its report, and the copy to commit.
pub struct Prepared {
    /// What the injection did (`output` names where the copy will go).
    pub report: Report,
    /// The corrupted copy, not yet in place.
    pub staged: Staged,
}

impl Prepared {
    /// Puts the corrupted copy in place and returns the report.
    pub fn commit(self) -> Result<Report> {
        self.staged.commit()?;
        Ok(self.report)
    }
}

fn out_path(input: &Path, output: &Output) -> PathBuf {
    match output {
        Output::Copy(p) => p.clone(),
        Output::InPlace => input.to_path_buf(),
    }
}

fn describe_model(spec: &Spec) -> String {
    use crate::model::Mode;
    let m = &spec.model;
    let mode = match &m.mode {
        Mode::BitRange { first, last, burst } => format!(
            "bit_range first_bit={} last_bit={} burst={burst}",
            first.map_or("0".into(), |f| f.to_string()),
            last.map_or("P-1".into(), |l| l.to_string())
        ),
        Mode::BitMask { pattern } => format!("bit_mask {}", pattern.iter().map(|b| if *b { '1' } else { '0' }).collect::<String>()),
        Mode::Scaling { factor } => format!("scaling_factor {factor}"),
    };
    let precision = m.precision.fixed().map_or("auto".to_string(), |p| p.to_string());
    format!(
        "{mode}; float_precision={precision}; allow_sign_change={}; allow_NaN_values={}; max_redraws={}",
        m.allow_sign_change, m.allow_nan, m.max_redraws
    )
}

/// The number of attempts `spec` makes on a file of `total` elements (or bytes), checked against
/// the memory their records need (a percentage of a large file can ask for more).
fn checked_attempts(spec: &Spec, total: u64) -> Result<u64> {
    let attempts = spec.tries.attempts(total);
    resilab_data::check_memory("injection_tries", &attempts, attempts.checked_mul(crate::config::ATTEMPT_BYTES), "one record per attempt")?;
    Ok(attempts)
}

/// Runs a value- or byte-mode injection on `input` (which is never modified unless `output`
/// is [`Output::InPlace`]) and puts the result in place.
pub fn inject_file(spec: &Spec, input: &Path, output: &Output, seed: u64) -> Result<Report> {
    prepare_file(spec, input, output, seed)?.commit()
}

/// Runs a value- or byte-mode injection on `input` into a staged copy, leaving the output as it
/// is until [`Prepared::commit`]: a caller that must write more (the log) before the output
/// counts as done commits last. A dataset it would target whose values cannot be read is an
/// error ([`prepare_file_with`] can leave it out instead).
pub fn prepare_file(spec: &Spec, input: &Path, output: &Output, seed: u64) -> Result<Prepared> {
    prepare_file_with(spec, input, output, seed, Unreadable::Refuse)
}

/// [`prepare_file`], with what to do with datasets whose values cannot be read.
pub fn prepare_file_with(spec: &Spec, input: &Path, output: &Output, seed: u64, policy: Unreadable) -> Result<Prepared> {
    existing(input)?;
    let output = out_path(input, output);
    if spec.target == TargetKind::Bytes {
        return inject_bytes(spec, input, &output, seed);
    }
    let reader = Reader::open(input)?;
    let skipped = unreadable(&reader, spec, policy)?;
    let (targets, total) = targets(&reader, spec)?;
    let plan = Plan {
        model: spec.model.clone(),
        probability: spec.probability,
        attempts: checked_attempts(spec, total)?,
        sampling: spec.sampling,
    };
    let draws = run::draw(&plan, &targets, seed);
    let touched = run::touched(draws.iter().map(|d| (d.target, d.index)), targets.len());
    let mut values = read_values(&reader, &targets, &touched)?;
    drop(reader);
    let originals = values.clone();
    let records = run::apply_attempts(&plan, &targets, &draws, &mut values, seed);
    let staged = stage(input, &output, output == input, |tmp| write_values(tmp, &targets, &touched, &values, &originals))?;
    let summary = Summary::of(&records, total);
    let header = Header {
        resilab_version: env!("CARGO_PKG_VERSION").into(),
        input: input.display().to_string(),
        output: output.display().to_string(),
        seed: Some(seed),
        target: "values".into(),
        model: describe_model(spec),
        probability: spec.probability,
        attempts: plan.attempts,
        sampling: spec.sampling.name().into(),
        candidates: targets.iter().map(|t| t.path.clone()).collect(),
        total_elements: total,
        ignored: spec.ignored.clone(),
        unreadable: skipped,
    };
    Ok(Prepared { report: Report { header, records, byte_records: Vec::new(), summary, output }, staged })
}

/// Current stored bits of the touched elements of each target.
fn read_values(reader: &Reader, targets: &[Target], touched: &[Vec<usize>]) -> Result<Values> {
    let mut values = Values::default();
    for (t, idx) in touched.iter().enumerate().filter(|(_, v)| !v.is_empty()) {
        let raw = reader.read_points(&targets[t].path, targets[t].dtype, idx)?;
        values.extend(idx.iter().zip(raw).map(|(&i, r)| ((t, i), r)));
    }
    Ok(values)
}

/// The byte at `offset`: as changed so far, else as in the file.
fn byte_at(file: &std::fs::File, path: &Path, current: &BTreeMap<u64, u8>, offset: u64) -> Result<u8> {
    if let Some(b) = current.get(&offset) {
        return Ok(*b);
    }
    let mut b = [0u8];
    file.read_exact_at(&mut b, offset).map_err(io(path))?;
    Ok(b[0])
}

/// Writes the changed elements of each target.
fn write_values(path: &Path, targets: &[Target], touched: &[Vec<usize>], values: &Values, originals: &Values) -> Result<()> {
    let editor = Editor::open(path)?;
    for (t, idx) in touched.iter().enumerate() {
        let changed: Vec<usize> = idx.iter().copied().filter(|&i| values.get(&(t, i)) != originals.get(&(t, i))).collect();
        if changed.is_empty() {
            continue;
        }
        let raw: Vec<u64> = changed.iter().map(|&i| values[&(t, i)]).collect();
        editor.write_points(&targets[t].path, targets[t].dtype, &changed, &raw)?;
    }
    Ok(editor.close()?)
}

fn inject_bytes(spec: &Spec, input: &Path, output: &Path, seed: u64) -> Result<Prepared> {
    let len = std::fs::metadata(input).map_err(io(input))?.len();
    // Region = file needs no dataset extents, so the file is not opened with HDF5 at all (it
    // may be too damaged for the library); the other regions need them. Where a file opens,
    // extents still tell data bytes from metadata in the log.
    let extents = if spec.region == crate::config::Region::File { Vec::new() } else { Reader::open(input).and_then(|r| r.extents())? };
    let intervals = bytes::region_intervals(spec.region, len, &extents);
    let total: u64 = intervals.iter().map(|(s, t)| t - s).sum();
    if total == 0 {
        return Err(Error::Config { key: "byte_region".into(), message: format!("{} holds no bytes of that region", input.display()) });
    }
    let attempts = checked_attempts(spec, total)?;
    let draws = bytes::draw_bytes(&intervals, attempts, spec.probability, seed);
    let file = std::fs::File::open(input).map_err(io(input))?;
    let mut current: BTreeMap<u64, u8> = BTreeMap::new();
    let mut records = Vec::with_capacity(draws.len());
    for (attempt, (offset, bit, selected)) in draws.into_iter().enumerate() {
        let old = byte_at(&file, input, &current, offset)?;
        let new = if selected { old ^ (1 << bit) } else { old };
        current.insert(offset, new);
        let loc = bytes::locate(&extents, offset, bit);
        records.push(ByteRecord {
            attempt: attempt as u64,
            offset,
            bit,
            outcome: if selected { Outcome::Corrupted } else { Outcome::NotSelected },
            old_byte: old,
            new_byte: new,
            region: if loc.is_some() { "data" } else { "metadata" }.into(),
            element: loc.as_ref().map(|l| l.1),
            element_bit_ieee: loc.as_ref().map(|l| l.2),
            dataset: loc.map(|l| l.0),
        });
    }
    drop(file);
    let staged = stage(input, output, output == input, |tmp| write_bytes(tmp, &current))?;
    let hits: Vec<&ByteRecord> = records.iter().filter(|r| r.outcome == Outcome::Corrupted).collect();
    let corrupted = hits.len() as u64;
    let summary = Summary {
        attempts,
        corrupted,
        not_selected: attempts - corrupted,
        distinct_elements: hits.iter().map(|r| r.offset).collect::<std::collections::HashSet<_>>().len() as u64,
        datasets_hit: hits.iter().filter_map(|r| r.dataset.as_deref()).collect::<std::collections::HashSet<_>>().len() as u64,
        total_elements: total,
        share_of_file_percent: corrupted as f64 * 100.0 / total as f64,
        ..Default::default()
    };
    let header = Header {
        resilab_version: env!("CARGO_PKG_VERSION").into(),
        input: input.display().to_string(),
        output: output.display().to_string(),
        seed: Some(seed),
        target: "bytes".into(),
        model: "one bit of one byte per attempt".into(),
        probability: spec.probability,
        attempts,
        sampling: format!("{:?}", spec.region).to_lowercase(),
        candidates: Vec::new(),
        total_elements: total,
        ignored: spec.ignored.clone(),
        unreadable: Vec::new(),
    };
    Ok(Prepared { report: Report { header, records: Vec::new(), byte_records: records, summary, output: output.to_path_buf() }, staged })
}

fn write_bytes(path: &Path, bytes: &BTreeMap<u64, u8>) -> Result<()> {
    let f = std::fs::OpenOptions::new().write(true).open(path).map_err(io(path))?;
    for (&offset, &b) in bytes {
        f.write_all_at(&[b], offset).map_err(io(path))?;
    }
    Ok(())
}

/// Writes a log: header, one line per attempt, summary. Atomic (staged and renamed).
pub fn write_log(path: &Path, report: &Report) -> Result<()> {
    stage_log(path, report)?.commit()
}

/// A log written beside its path and not yet renamed into place.
pub struct StagedLog {
    tmp: tempfile::NamedTempFile,
    path: PathBuf,
}

impl StagedLog {
    /// Renames the log into place.
    pub fn commit(self) -> Result<()> {
        self.tmp.persist(&self.path).map_err(|e| Error::Io { path: self.path.clone(), error: e.error })?;
        Ok(())
    }

    /// Links the log into place only if nothing is there yet (an existing file or link is
    /// never replaced).
    pub fn commit_new(self) -> Result<()> {
        let path = self.path;
        self.tmp.persist_noclobber(&path).map_err(|e| match e.error.kind() {
            std::io::ErrorKind::AlreadyExists => Error::Path { path: path.clone(), message: crate::paths::EXISTING_LOG.into() },
            _ => Error::Io { path: path.clone(), error: e.error },
        })?;
        Ok(())
    }
}

/// Writes a log into a hidden file beside `path`; [`StagedLog::commit`] puts it in place.
pub fn stage_log(path: &Path, report: &Report) -> Result<StagedLog> {
    let dir = parent_dir(path);
    // 0666 less the umask, as any file the process creates: a temporary file is 0600 otherwise.
    let tmp = tempfile::Builder::new()
        .prefix(&staged_prefix(STAGED_LOG, std::process::id()))
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(&dir)
        .map_err(io(&dir))?;
    {
        let mut w = BufWriter::with_capacity(1 << 20, tmp.as_file());
        let mut line = |l: &LineRef<'_>| -> Result<()> {
            serde_json::to_writer(&mut w, l).map_err(|error| Error::Json { path: path.to_path_buf(), error })?;
            w.write_all(b"\n").map_err(io(path))
        };
        line(&LineRef::Header(&report.header))?;
        for r in &report.records {
            line(&LineRef::Attempt(r))?;
        }
        for r in &report.byte_records {
            line(&LineRef::ByteAttempt(r))?;
        }
        line(&LineRef::Summary(&report.summary))?;
        w.flush().map_err(io(path))?;
    }
    Ok(StagedLog { tmp, path: path.to_path_buf() })
}

/// Reads a log written by [`write_log`]: a regular file (never a FIFO or a device) within the
/// memory budget, named by `--replay` or a config's `injection_sequence_path`.
pub fn read_log(path: &Path) -> Result<Vec<LogLine>> {
    let text = resilab_limits::RegularFile::open("--replay/injection_sequence_path", path)?.read_text(u64::MAX, "an injection log")?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed: LogLine = serde_json::from_str(line).map_err(|e| Error::Replay {
            path: path.to_path_buf(),
            line: n + 1,
            message: format!("not a resilab injection log line: {e}"),
        })?;
        out.push(parsed);
    }
    if !matches!(out.first(), Some(LogLine::Header(_))) {
        return Err(Error::Replay {
            path: path.to_path_buf(),
            line: 1,
            message: "a resilab injection log starts with a header line".into(),
        });
    }
    Ok(out)
}

/// The header of a log [`read_log`] returned: its first line, which names the input and output.
pub fn log_header(lines: &[LogLine]) -> Option<&Header> {
    match lines.first() {
        Some(LogLine::Header(h)) => Some(h),
        _ => None,
    }
}

/// Redoes the corruptions of a log on `input`: the same datasets, elements and bits (or bytes),
/// in the same order. On a copy of the original file the output is identical, byte for byte,
/// to the original output. Corruptions that find a value other than the logged one (another
/// file) are still applied and counted in [`Replay::differing`].
/// `lines` is the log as [`read_log`] returns it; `log` names it in errors.
pub fn replay_file(log: &Path, lines: &[LogLine], input: &Path, output: &Output) -> Result<Replay> {
    existing(input)?;
    let output = out_path(input, output);
    let bad = |line: usize, message: String| Error::Replay { path: log.to_path_buf(), line, message };
    let byte_lines: Vec<(usize, &ByteRecord)> =
        lines.iter().enumerate().filter_map(|(i, l)| if let LogLine::ByteAttempt(r) = l { Some((i + 1, r)) } else { None }).collect();
    let value_lines: Vec<(usize, &Record)> =
        lines.iter().enumerate().filter_map(|(i, l)| if let LogLine::Attempt(r) = l { Some((i + 1, r)) } else { None }).collect();
    let mut replay = Replay { applied: 0, differing: 0, records: Vec::new(), output: output.clone() };
    if !byte_lines.is_empty() {
        let len = std::fs::metadata(input).map_err(io(input))?.len();
        let file = std::fs::File::open(input).map_err(io(input))?;
        let mut current: BTreeMap<u64, u8> = BTreeMap::new();
        for (n, r) in byte_lines.iter().filter(|(_, r)| r.outcome == Outcome::Corrupted) {
            if r.offset >= len || r.bit > 7 {
                return Err(bad(*n, format!("offset {} bit {} is outside the {len}-byte file", r.offset, r.bit)));
            }
            let old = byte_at(&file, input, &current, r.offset)?;
            replay.differing += u64::from(old != r.old_byte);
            current.insert(r.offset, old ^ (1 << r.bit));
            replay.applied += 1;
        }
        drop(file);
        stage(input, &output, output == input, |tmp| write_bytes(tmp, &current))?.commit()?;
        return Ok(replay);
    }
    let reader = Reader::open(input)?;
    let infos: HashMap<String, resilab_h5::DatasetInfo> = reader.datasets()?.into_iter().map(|d| (d.path.clone(), d)).collect();
    let mut targets: Vec<Target> = Vec::new();
    let mut slot: HashMap<&str, usize> = HashMap::new();
    let mut todo: Vec<(usize, usize, usize, Flip, &Record)> = Vec::new();
    for (n, r) in &value_lines {
        let Some(flip) = r.flip() else { continue };
        let info = infos.get(&r.dataset).ok_or_else(|| bad(*n, format!("dataset {} is not in {}", r.dataset, input.display())))?;
        if info.dtype.to_string() != r.dtype {
            return Err(bad(*n, format!("dataset {} is {} in {}, the log says {}", r.dataset, info.dtype, input.display(), r.dtype)));
        }
        if r.index >= info.len() {
            return Err(bad(*n, format!("element {} of {} is out of range ({} elements)", r.index, r.dataset, info.len())));
        }
        let t = *slot.entry(r.dataset.as_str()).or_insert_with(|| {
            targets.push(Target { path: info.path.clone(), dtype: info.dtype, len: info.len() });
            targets.len() - 1
        });
        todo.push((*n, t, r.index, flip, *r));
    }
    let touched = run::touched(todo.iter().map(|&(_, t, i, _, _)| (t, i)), targets.len());
    let mut values = read_values(&reader, &targets, &touched)?;
    drop(reader);
    let originals = values.clone();
    for &(n, t, i, ref flip, logged) in &todo {
        let dtype = targets[t].dtype;
        let old = values[&(t, i)];
        let new =
            model::apply(dtype, old, flip).ok_or_else(|| bad(n, format!("the flip does not fit element {i} of {}", targets[t].path)))?;
        replay.differing += u64::from(logged.raw().is_none_or(|(o, _)| o != old));
        let mut rec = logged.clone();
        rec.old = run::Num(model::value_of(dtype, old));
        rec.old_bits = run::hex(old, dtype);
        run::describe(&mut rec, dtype, old, new, flip, f64::INFINITY);
        rec.extreme = logged.extreme;
        replay.records.push(rec);
        values.insert((t, i), new);
        replay.applied += 1;
    }
    stage(input, &output, output == input, |tmp| write_values(tmp, &targets, &touched, &values, &originals))?.commit()?;
    Ok(replay)
}

/// What a replay did.
#[derive(Clone, Debug)]
pub struct Replay {
    /// Corruptions redone.
    pub applied: u64,
    /// Of those, how many found a value (or byte) other than the logged one before the flip
    /// (0 on a copy of the original file).
    pub differing: u64,
    /// The redone value corruptions, with this file's values.
    pub records: Vec<Record>,
    /// The file written.
    pub output: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_input_is_an_io_error_and_a_directory_a_path_error() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("missing.h5");
        let e = existing(&missing).unwrap_err();
        assert!(matches!(&e, Error::Io { path, error } if *path == missing && error.kind() == std::io::ErrorKind::NotFound), "{e:?}");
        let e = existing(d.path()).unwrap_err();
        assert!(matches!(&e, Error::Path { path, .. } if path == d.path()), "{e:?}");
        assert_eq!(e.to_string(), format!("{}: is not a file", d.path().display()));
    }
}
