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

/// A row of `faults.csv`.
#[derive(Serialize)]
struct FaultRow<'a> {
    run_id: &'a str,
    event: usize,
    step: u64,
    rank: usize,
    entry: usize,
    target: &'a str,
    attempt: u32,
    micro_batch: Option<usize>,
    crash_at_s: Option<f64>,
    permanent: bool,
    tensor: String,
    index: Option<u64>,
    outcome: String,
    bits_ieee: String,
    old: String,
    new: String,
    nan: Option<bool>,
    inf: Option<bool>,
    extreme: Option<bool>,
}

fn text(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// The rows of one log line: one per record (value attempted), or one for a crash.
fn rows_of<'a>(run_id: &'a str, l: &'a LogLine) -> Vec<FaultRow<'a>> {
    let base = |r: Option<&serde_json::Value>| {
        let field = |k: &str| r.and_then(|r| r.get(k));
        let bits = field("bits_ieee").and_then(|b| b.as_array()).map(|b| b.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(";"));
        FaultRow {
            run_id,
            event: l.event.id,
            step: l.event.step,
            rank: l.event.rank,
            entry: l.event.entry,
            target: &l.event.target,
            attempt: l.attempt,
            micro_batch: l.micro_batch,
            crash_at_s: l.crash_at_s,
            permanent: l.permanent,
            tensor: text(field("dataset")),
            index: field("index").and_then(serde_json::Value::as_u64),
            outcome: text(field("outcome")),
            bits_ieee: bits.unwrap_or_default(),
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

/// The CSV of the fault logs of `rows`' runs, read from `dir/runs/<id>/faults.jsonl` (a run
/// without one met no fault), in the rows' order.
pub fn faults_csv(dir: &Path, rows: &[Row]) -> Result<Vec<u8>> {
    let mut w = resilab_text::CsvWriter::without_headers(Vec::new());
    let csv_err = |source: csv::Error| Error::Csv { path: dir.join(FAULTS_CSV), source };
    w.write_record(HEADER).map_err(csv_err)?;
    for row in rows {
        let path = dir.join("runs").join(&row.id).join("faults.jsonl");
        let Ok(body) = std::fs::read_to_string(&path) else { continue };
        for (n, line) in body.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let l: LogLine =
                serde_json::from_str(line).map_err(|source| Error::Json { what: format!("{} line {}", path.display(), n + 1), source })?;
            for r in rows_of(&row.id, &l) {
                w.serialize(r).map_err(csv_err)?;
            }
        }
    }
    w.into_inner().map_err(|e| Error::Csv { path: dir.join(FAULTS_CSV), source: e.into() })
}

/// `faults.csv`'s columns, in order.
pub const HEADER: [&str; 19] = [
    "run_id",
    "event",
    "step",
    "rank",
    "entry",
    "target",
    "attempt",
    "micro_batch",
    "crash_at_s",
    "permanent",
    "tensor",
    "index",
    "outcome",
    "bits_ieee",
    "old",
    "new",
    "nan",
    "inf",
    "extreme",
];

/// The rows of the parts' `faults.csv` files for the runs `ids`, each run's from the first part
/// that holds it, header first; `None` when no part has the file.
pub fn merged_faults_csv(parts: &[std::path::PathBuf], ids: &BTreeSet<String>) -> Result<Option<Vec<u8>>> {
    // Cells are read back as written and written again as every CSV is (a part written before
    // cells were escaped gains its escapes).
    let mut out = resilab_text::CsvWriter::from_writer(Vec::new());
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut any = false;
    for part in parts {
        let path = part.join(FAULTS_CSV);
        let csv_err = |source: csv::Error| Error::Csv { path: path.clone(), source };
        let mut rows = match csv::Reader::from_path(&path) {
            Ok(r) => r,
            Err(e) if matches!(e.kind(), csv::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound) => continue,
            Err(e) => return Err(csv_err(e)),
        };
        if !any {
            out.write_record(rows.headers().map_err(csv_err)?).map_err(csv_err)?;
            any = true;
        }
        let mut here: BTreeSet<String> = BTreeSet::new();
        for row in rows.records() {
            let row = resilab_text::unescaped(&row.map_err(csv_err)?);
            let id = row.get(0).unwrap_or_default();
            if ids.contains(id) && !taken.contains(id) {
                here.insert(id.to_string());
                out.write_record(&row).map_err(csv_err)?;
            }
        }
        taken.extend(here);
    }
    let bytes = out.into_inner().map_err(|e| Error::Csv { path: FAULTS_CSV.into(), source: e.into() })?;
    Ok(any.then_some(bytes))
}
