//! `faults.csv`: every fault a `train` campaign's runs met, one row per value it altered (or
//! one row for a crash), with the run's id, read from each run's own `faults.jsonl`.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result, Row};

/// The campaign's fault log.
pub const FAULTS_CSV: &str = "faults.csv";

/// A line of a run's `faults.jsonl` (the fields `faults.csv` keeps).
#[derive(Deserialize)]
struct LogLine {
    event: Event,
    attempt: u32,
    micro_batch: Option<usize>,
    crash_at_s: Option<f64>,
    #[serde(default)]
    permanent: bool,
    records: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct Event {
    id: usize,
    step: u64,
    rank: usize,
    entry: usize,
    target: String,
}

/// A row of `faults.csv`: its columns are these fields' names, in order ([`crate::header`]).
/// A fault that altered values has one row per value it attempted; a crash has one row, its
/// value columns empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultRow {
    /// The run that met the fault.
    pub run_id: String,
    /// The fault's number in the run's schedule.
    pub event: usize,
    /// The step it struck.
    pub step: u64,
    /// The worker it struck.
    pub rank: usize,
    /// Its `[[fault]]` entry.
    pub entry: usize,
    /// What it struck (`weights`, `optimizer`, `crash`, ...).
    pub target: String,
    /// The attempt of the step it struck.
    pub attempt: u32,
    /// The micro-batch it struck (pipelines).
    pub micro_batch: Option<usize>,
    /// A crash: seconds from its step's start.
    pub crash_at_s: Option<f64>,
    /// The worker was lost for good.
    pub permanent: bool,
    /// The dataset of the value attempted.
    pub tensor: String,
    /// The value's index in it.
    pub index: Option<u64>,
    /// What the attempt did (`corrupted`, ...).
    pub outcome: String,
    /// The IEEE bits flipped, `;`-separated.
    pub bits_ieee: String,
    /// The same bits in reference numbering (0 = sign, then the exponent from its top bit),
    /// `;`-separated.
    #[serde(default)]
    pub bits_reference: String,
    /// The word flipped: `f32`, `bf16` or `f16` (a half-precision run's half values), ...
    #[serde(default)]
    pub dtype: String,
    /// The value before.
    pub old: String,
    /// The value after.
    pub new: String,
    /// The value after is NaN.
    pub nan: Option<bool>,
    /// The value after is infinite.
    pub inf: Option<bool>,
    /// The value after is extreme.
    pub extreme: Option<bool>,
}

fn text(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// The rows of one log line: one per record (value attempted), or one for a crash.
fn rows_of(run_id: &str, l: &LogLine) -> Vec<FaultRow> {
    let base = |r: Option<&serde_json::Value>| {
        let field = |k: &str| r.and_then(|r| r.get(k));
        let bits = |k: &str| field(k).and_then(|b| b.as_array()).map(|b| b.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(";"));
        FaultRow {
            run_id: run_id.to_string(),
            event: l.event.id,
            step: l.event.step,
            rank: l.event.rank,
            entry: l.event.entry,
            target: l.event.target.clone(),
            attempt: l.attempt,
            micro_batch: l.micro_batch,
            crash_at_s: l.crash_at_s,
            permanent: l.permanent,
            tensor: text(field("dataset")),
            index: field("index").and_then(serde_json::Value::as_u64),
            outcome: text(field("outcome")),
            bits_ieee: bits("bits_ieee").unwrap_or_default(),
            bits_reference: bits("bits_reference").unwrap_or_default(),
            dtype: text(field("dtype")),
            old: text(field("old")),
            new: text(field("new")),
            nan: field("nan").and_then(serde_json::Value::as_bool),
            inf: field("inf").and_then(serde_json::Value::as_bool),
            extreme: field("extreme").and_then(serde_json::Value::as_bool),
        }
    };
    match l.records.is_empty() {
        true => vec![base(None)],
        false => l.records.iter().map(|r| base(Some(r))).collect(),
    }
}

/// What a `train` run's faults altered, for its `runs.csv` row: the values they corrupted, by
/// layer, bit, word and target (each column `;`-separated).
#[derive(Debug, Default, PartialEq)]
pub struct Flips {
    /// Layers (checkpoint paths, as [`crate::layers::recorded`] gives them) hit, distinct.
    pub layers: String,
    /// Bits flipped, reference numbering, every one.
    pub bits: String,
    /// Words flipped (`f32`, `bf16`, `f16`), distinct.
    pub words: String,
    /// Targets of the faults that corrupted a value, distinct.
    pub targets: String,
}

/// The [`Flips`] of the run whose output directory is `run_dir`, read from its `faults.jsonl`
/// (none without one: no fault struck).
pub fn flips(run_dir: &Path) -> Result<Flips> {
    let (mut layers, mut words, mut targets) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut bits = Vec::new();
    for l in log_lines(&run_dir.join("faults.jsonl"))? {
        for r in rows_of("", &l).into_iter().filter(|r| r.outcome == "corrupted") {
            layers.insert(crate::layers::recorded(&r.tensor));
            bits.extend(r.bits_reference.split(';').filter(|b| !b.is_empty()).map(str::to_string));
            words.insert(r.dtype);
            targets.insert(r.target);
        }
    }
    let join = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>().join(";");
    Ok(Flips { layers: join(layers), bits: bits.join(";"), words: join(words), targets: join(targets) })
}

/// The CSV of the fault logs of `rows`' runs, read from `dir/runs/<id>/faults.jsonl` (a run
/// without one met no fault), in the rows' order.
pub fn faults_csv(dir: &Path, rows: &[Row]) -> Result<Vec<u8>> {
    let mut faults = Vec::new();
    for row in rows {
        for l in log_lines(&dir.join("runs").join(&row.id).join("faults.jsonl"))? {
            faults.extend(rows_of(&row.id, &l));
        }
    }
    faults_csv_bytes(&faults)
}

/// The lines of a run's `faults.jsonl` at `path` (none without the file: no fault struck); a
/// line that does not parse is an error naming the file and line.
fn log_lines(path: &Path) -> Result<Vec<LogLine>> {
    let Ok(body) = std::fs::read_to_string(path) else { return Ok(Vec::new()) };
    let lines = body.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    lines
        .map(|(n, line)| {
            serde_json::from_str(line).map_err(|source| Error::Json { what: format!("{} line {}", path.display(), n + 1), source })
        })
        .collect()
}

/// The rows of the `faults.csv` at `path`, each read by its columns' names into a [`FaultRow`]
/// (cells unescaped as written); `None` when there is no such file.
pub fn read_faults_csv(path: &Path) -> Result<Option<Vec<FaultRow>>> {
    let csv_err = |source: csv::Error| Error::Csv { path: path.to_path_buf(), source };
    let mut reader = match csv::Reader::from_path(path) {
        Ok(r) => r,
        Err(e) if matches!(e.kind(), csv::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound) => return Ok(None),
        Err(e) => return Err(csv_err(e)),
    };
    resilab_text::csv_rows(&mut reader).map(Some).map_err(csv_err)
}

/// `rows` as a `faults.csv` file: the header [`FaultRow`]'s columns, then a line per row.
fn faults_csv_bytes(rows: &[FaultRow]) -> Result<Vec<u8>> {
    let csv_err = |source: csv::Error| Error::Csv { path: FAULTS_CSV.into(), source };
    let mut w = resilab_text::CsvWriter::without_headers(Vec::new());
    w.write_record(crate::header::<FaultRow>().map_err(csv_err)?).map_err(csv_err)?;
    for r in rows {
        w.serialize(r).map_err(csv_err)?;
    }
    w.into_inner().map_err(|e| csv_err(e.into()))
}

/// The rows of the parts' `faults.csv` files for the runs `ids`, each run's from the first part
/// that holds it, header first; `None` when no part has the file.
pub fn merged_faults_csv(parts: &[std::path::PathBuf], ids: &BTreeSet<String>) -> Result<Option<Vec<u8>>> {
    // Cells are read back as written and written again as every CSV is (a part written before
    // cells were escaped gains its escapes).
    let mut merged = Vec::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut any = false;
    for part in parts {
        let Some(rows) = read_faults_csv(&part.join(FAULTS_CSV))? else { continue };
        any = true;
        let mut here: BTreeSet<String> = BTreeSet::new();
        for row in rows {
            if ids.contains(&row.run_id) && !taken.contains(&row.run_id) {
                here.insert(row.run_id.clone());
                merged.push(row);
            }
        }
        taken.extend(here);
    }
    if !any {
        return Ok(None);
    }
    faults_csv_bytes(&merged).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_flips_come_from_its_corrupted_records_only() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(flips(dir.path()).unwrap(), Flips::default(), "no log: no fault struck");
        let record = |dataset: &str, outcome: &str, dtype: &str, bits: &[u32]| serde_json::json!({"dataset": dataset, "index": 3, "dtype": dtype, "outcome": outcome, "bits_reference": bits, "bits_ieee": bits});
        let line = |id: usize, target: &str, records: Vec<serde_json::Value>| {
            serde_json::json!({"event": {"id": id, "step": 5, "rank": 0, "entry": 0, "target": target}, "attempt": 0, "micro_batch": null, "records": records})
                .to_string()
        };
        let log = [
            line(0, "crash", vec![]),
            line(1, "weight_copy", vec![record("model/layer1/0/conv1/weight", "corrupted", "f16", &[1])]),
            line(
                2,
                "gradients",
                vec![record("gradients/fc/bias", "rejected", "bf16", &[4]), record("gradients/fc/bias", "corrupted", "f16", &[7, 9])],
            ),
        ];
        std::fs::write(dir.path().join("faults.jsonl"), log.join("\n") + "\n").unwrap();
        let f = flips(dir.path()).unwrap();
        assert_eq!(f.layers, "gradients/fc/bias;model/layer1/0/conv1");
        assert_eq!((f.bits.as_str(), f.words.as_str(), f.targets.as_str()), ("1;7;9", "f16", "gradients;weight_copy"));
        std::fs::write(dir.path().join("faults.jsonl"), "{not json\n").unwrap();
        assert!(flips(dir.path()).unwrap_err().to_string().contains("faults.jsonl line 1"));
    }
}
