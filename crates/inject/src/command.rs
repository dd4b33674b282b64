//! `resilab inject` as one call: which file, where the copy and the log go, the checks that keep
//! an injection from overwriting its own input or log, and replay or prepare-then-commit.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::{Error, LogLine, Output, Replay, Report, Result, Spec, TargetKind, Unreadable};

/// What an injection was asked to do (the command's flags).
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The file to corrupt (else the config's `hdf5_file`, else the replayed log's input).
    pub file: Option<PathBuf>,
    /// The injector config (YAML or TOML).
    pub config: Option<PathBuf>,
    /// A log to replay instead of drawing anew (else the config's `replay`).
    pub replay: Option<PathBuf>,
    /// The corrupted copy (default: beside the input, see [`crate::default_output`]).
    pub output: Option<PathBuf>,
    /// Corrupt the input itself.
    pub in_place: bool,
    /// The log (default: beside the output, see [`crate::default_log`]).
    pub log: Option<PathBuf>,
    /// The seed (else the config's, else a fresh one, which is logged).
    pub seed: Option<u64>,
    /// What to do with datasets the config targets whose values cannot be read.
    pub unreadable: Unreadable,
    /// With `in_place`, replace an input that is a symbolic link or has other hard links with
    /// a file of its own (else such an input is refused).
    pub replace_link: bool,
    /// Replace an existing `log` (else an existing `log` is refused).
    pub force: bool,
}

/// What an injection did.
#[derive(Debug)]
pub enum Done {
    /// A log was replayed on `input`.
    Replayed {
        /// The log.
        log: PathBuf,
        /// The file the log was replayed on.
        input: PathBuf,
        /// What the replay did.
        replay: Replay,
        /// What the user should know of (a link replaced by a file).
        warnings: Vec<String>,
    },
    /// Values or bytes were corrupted.
    Corrupted {
        /// What was done, and the file written.
        report: Box<Report>,
        /// The seed used.
        seed: u64,
        /// The log written.
        log: PathBuf,
        /// What the user should know of (datasets left out, a link replaced by a file).
        warnings: Vec<String>,
    },
}

impl Done {
    /// One JSON object for `--json`.
    pub fn json(&self) -> serde_json::Value {
        match self {
            Done::Replayed { replay: r, warnings, .. } => {
                json!({"replayed": r.applied, "differing_from_log": r.differing, "output": r.output, "warnings": warnings})
            }
            Done::Corrupted { report, seed, log, warnings } => {
                json!({"summary": report.summary, "seed": seed, "output": report.output, "log": log, "warnings": warnings})
            }
        }
    }

    /// What the user should know of beside the result, one line each (for stderr).
    pub fn warnings(&self) -> &[String] {
        match self {
            Done::Replayed { warnings, .. } | Done::Corrupted { warnings, .. } => warnings,
        }
    }

    /// One line for a person.
    pub fn text(&self) -> String {
        match self {
            Done::Replayed { log, input, replay: r, .. } => {
                let differing = if r.differing > 0 {
                    format!(" ({} found a different value than logged: not the same file)", r.differing)
                } else {
                    String::new()
                };
                format!(
                    "replayed {} corruption(s) from {} on {} -> {}{differing}",
                    r.applied,
                    log.display(),
                    input.display(),
                    r.output.display()
                )
            }
            Done::Corrupted { report, seed, log, .. } => {
                let s = &report.summary;
                format!(
                    "corrupted {} of {} attempts ({} not selected, {} rejected; {} NaN, {} Inf, {} extreme; {:.6}% of the file's {} elements) seed {seed} -> {}; log {}",
                    s.corrupted,
                    s.attempts,
                    s.not_selected,
                    s.rejected,
                    s.nan,
                    s.inf,
                    s.extreme,
                    s.share_of_file_percent,
                    s.total_elements,
                    report.output.display(),
                    log.display()
                )
            }
        }
    }
}

/// A check run on a file before this process opens it with HDF5 (a child process that reads it
/// first, so that a file that crashes the library fails with an error); its message on failure.
pub type FileCheck<'a> = &'a dyn Fn(&Path) -> std::result::Result<(), String>;

/// The injector config the request names, loaded and validated (`None` without one); its
/// `ignored` keys are the caller's to report.
pub fn load_spec(request: &Request) -> Result<Option<Spec>> {
    let Some(path) = &request.config else { return Ok(None) };
    let spec = crate::RawConfig::load(path)?.validate().map_err(|e| Error::Parse { path: path.clone(), message: e.to_string() })?;
    Ok(Some(spec))
}

/// Runs the injection `request` asks for, with `spec` (from [`load_spec`]); `check` is run on
/// every file opened with HDF5 first.
pub fn inject(request: &Request, spec: Option<Spec>, check: FileCheck<'_>) -> Result<Done> {
    let replay = request.replay.clone().or_else(|| spec.as_ref().and_then(|s| s.replay.clone()));
    let replay_lines = replay.as_deref().map(crate::read_log).transpose()?;
    let input = input_file(request, spec.as_ref(), replay_lines.as_deref())?;
    let output = if request.in_place {
        Output::InPlace
    } else {
        Output::Copy(request.output.clone().unwrap_or_else(|| crate::default_output(&input)))
    };
    if let Output::Copy(out) = &output
        && crate::same_file(out, &input)
    {
        return Err(Error::Usage(format!("--output {} is the input file; use --in-place to corrupt the input itself", out.display())));
    }
    let out_path = match &output {
        Output::Copy(p) => p.clone(),
        Output::InPlace => input.clone(),
    };
    let log = request.log.clone().unwrap_or_else(|| crate::default_log(&out_path));
    let mut roles: Vec<(&str, &Path)> = vec![("the input file", &input)];
    if let Output::Copy(out) = &output {
        roles.push(("--output", out));
    }
    roles.push(match &replay {
        Some(r) => ("--replay", r),
        None => ("--log", &log),
    });
    crate::check_distinct(&roles)?;
    let mut warnings = Vec::new();
    if request.in_place
        && let Some(link) = crate::paths::link_of(&input)?
    {
        if !request.replace_link {
            return Err(Error::Usage(link.refusal(&input)));
        }
        warnings.push(link.replaced(&input));
    }
    if replay.is_none()
        && let Some(explicit) = &request.log
    {
        crate::paths::check_new_log(explicit, request.force)?;
    }
    // Raw byte flips over the whole file never open it with HDF5; everything else does.
    let raw_bytes = spec.as_ref().is_some_and(|s| s.target == TargetKind::Bytes && s.region == crate::Region::File);
    if replay.is_some() || !raw_bytes {
        check(&input).map_err(Error::Check)?;
    }
    if let (Some(log), Some(lines)) = (replay, replay_lines) {
        let replay = crate::replay_file(&log, &lines, &input, &output)?;
        return Ok(Done::Replayed { log, input, replay, warnings });
    }
    let spec = spec.ok_or_else(|| Error::Usage("a config is required unless --replay is given".into()))?;
    let seed = request.seed.or(spec.seed).unwrap_or_else(fresh_seed);
    // The log is written before the corrupted copy is put in place, so a failure leaves
    // neither behind.
    let prepared = crate::prepare_file_with(&spec, &input, &output, seed, request.unreadable)?;
    let staged_log = crate::stage_log(&log, &prepared.report)?;
    let report = prepared.commit()?;
    if request.log.is_some() && !request.force {
        staged_log.commit_new()?;
    } else {
        staged_log.commit()?;
    }
    warnings.extend(crate::file::skipped_warnings(&report.header.unreadable));
    Ok(Done::Corrupted { report: Box::new(report), seed, log, warnings })
}

/// The file to corrupt: the flag, else the config's `hdf5_file`, else the replayed log's input.
fn input_file(request: &Request, spec: Option<&Spec>, replay: Option<&[LogLine]>) -> Result<PathBuf> {
    if let Some(f) = request.file.as_ref().or_else(|| spec.and_then(|s| s.file.as_ref())) {
        return Ok(f.clone());
    }
    match replay {
        Some(lines) => match crate::log_header(lines) {
            Some(h) => Ok(PathBuf::from(&h.input)),
            None => Err(Error::Usage("the replayed log has no header line naming the input file; give --file".into())),
        },
        None => Err(Error::Usage("no file to corrupt: set `hdf5_file` in the config or give --file".into())),
    }
}

/// A seed from the operating system's entropy, for runs given none (it is logged).
pub fn fresh_seed() -> u64 {
    use rand::Rng;
    rand::rng().random()
}
