//! The record of finished runs: `runs.jsonl` is the record (one JSON object per line, appended
//! and flushed as each run ends); `runs.csv` holds the same rows and is rebuilt from it when a
//! campaign resumes or campaigns are merged.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Kind, Metrics, Result, Status};

/// One finished run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Stable run id.
    pub id: String,
    /// Position in the grid.
    pub index: u64,
    /// Grid coordinates: axis key to option label.
    pub coords: BTreeMap<String, String>,
    /// Training seed.
    pub seed: u64,
    /// Repetition.
    pub rep: u64,
    /// How it ended.
    pub status: Status,
    /// What went wrong, if anything.
    pub message: Option<String>,
    /// Measurements.
    #[serde(flatten)]
    pub metrics: Metrics,
}

impl Row {
    /// The CSV header for rows with these axis keys.
    pub fn header(axes: &[String], kind: Kind) -> Vec<String> {
        let mut h = vec!["id".to_string(), "index".into()];
        h.extend(axes.iter().cloned());
        h.extend(["seed".to_string(), "rep".into(), "status".into()]);
        h.extend(crate::metric_columns(kind).iter().map(|c| c.to_string()));
        h.push("message".into());
        h
    }

    /// This row's CSV fields, in [`Row::header`] order.
    pub fn fields(&self, axes: &[String], kind: Kind) -> Vec<String> {
        let mut f = vec![self.id.clone(), self.index.to_string()];
        f.extend(axes.iter().map(|a| self.coords.get(a).cloned().unwrap_or_default()));
        f.extend([self.seed.to_string(), self.rep.to_string(), self.status.name().to_string()]);
        let m = serde_json::to_value(&self.metrics).unwrap_or_default();
        for c in crate::metric_columns(kind) {
            f.push(match &m[c] {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            });
        }
        f.push(self.message.clone().unwrap_or_default());
        f
    }
}

/// Reads `runs.jsonl`. A last line cut short (the campaign was killed while writing it) is
/// dropped and, with `repair`, cut from the file; any other bad line is an error naming it.
pub fn read_rows(path: &Path, repair: bool) -> Result<Vec<Row>> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    if complete < bytes.len() && repair {
        let f = std::fs::OpenOptions::new().write(true).open(path).map_err(io)?;
        f.set_len(complete as u64).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    let text = String::from_utf8_lossy(&bytes[..complete]);
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: Row = serde_json::from_str(line).map_err(|e| Error::Config(format!("{} line {}: {e}", path.display(), i + 1)))?;
        rows.push(row);
    }
    Ok(rows)
}

/// Writes `rows` as CSV to `path` (atomically), one column per axis key.
pub fn write_csv(path: &Path, axes: &[String], kind: Kind, rows: &[Row]) -> Result<()> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let csv_err = |e: csv::Error| Error::Config(format!("{}: {e}", path.display()));
    w.write_record(Row::header(axes, kind)).map_err(csv_err)?;
    for r in rows {
        w.write_record(r.fields(axes, kind)).map_err(csv_err)?;
    }
    let bytes = w.into_inner().map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
    resilab_runner::write_atomic(path, &bytes)?;
    Ok(())
}

/// Writes `rows` as the whole record of `dir`: `runs.jsonl` and `runs.csv` (each atomically).
pub fn write_rows(dir: &Path, axes: &[String], kind: Kind, rows: &[Row]) -> Result<()> {
    let mut jsonl = Vec::new();
    for r in rows {
        jsonl.extend(serde_json::to_vec(r).map_err(|e| Error::Config(e.to_string()))?);
        jsonl.push(b'\n');
    }
    resilab_runner::write_atomic(&dir.join(crate::RUNS_JSONL), &jsonl)?;
    write_csv(&dir.join(crate::RUNS_CSV), axes, kind, rows)
}

/// Appends rows to an open `runs.jsonl` and `runs.csv`, flushing each.
pub(crate) struct Appender {
    jsonl: std::fs::File,
    csv: csv::Writer<std::fs::File>,
    axes: Vec<String>,
    kind: Kind,
    dir: std::path::PathBuf,
}

impl Appender {
    /// Opens both files in `dir` for appending (the CSV must already have its header).
    pub(crate) fn open(dir: &Path, axes: Vec<String>, kind: Kind) -> Result<Self> {
        let open = |name: &str| resilab_runner::files::append_output(&dir.join(name));
        let csv = csv::WriterBuilder::new().has_headers(false).from_writer(open(crate::RUNS_CSV)?);
        Ok(Self { jsonl: open(crate::RUNS_JSONL)?, csv, axes, kind, dir: dir.to_path_buf() })
    }

    /// Appends one row to both files.
    pub(crate) fn append(&mut self, row: &Row) -> Result<()> {
        let p = self.dir.join(crate::RUNS_JSONL);
        let line = serde_json::to_string(row).map_err(|e| Error::Config(e.to_string()))?;
        writeln!(self.jsonl, "{line}").map_err(|source| Error::Io { path: p.clone(), source })?;
        self.jsonl.flush().map_err(|source| Error::Io { path: p, source })?;
        let p = self.dir.join(crate::RUNS_CSV);
        self.csv.write_record(row.fields(&self.axes, self.kind)).map_err(|e| Error::Config(format!("{}: {e}", p.display())))?;
        self.csv.flush().map_err(|source| Error::Io { path: p, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str) -> Row {
        Row {
            id: id.into(),
            index: 3,
            coords: [("model".to_string(), "resnet".to_string())].into(),
            seed: 1,
            rep: 0,
            status: Status::Ok,
            message: None,
            metrics: Metrics { final_acc: Some(0.5), nev: Some(false), layers: Some("a;b".into()), ..Metrics::default() },
        }
    }

    #[test]
    fn a_cut_last_line_is_dropped_and_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("runs.jsonl");
        let full = format!("{}\n{}\n", serde_json::to_string(&row("a")).unwrap(), serde_json::to_string(&row("b")).unwrap());
        std::fs::write(&p, format!("{full}{{\"id\":\"c\",\"ind")).unwrap();
        let rows = read_rows(&p, true).unwrap();
        assert_eq!(rows.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), full);
        assert_eq!(rows[0], row("a"));
    }

    #[test]
    fn csv_has_one_column_per_axis_and_metric() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("runs.csv");
        let axes = vec!["model".to_string()];
        write_csv(&p, &axes, Kind::Restart, &[row("a")]).unwrap();
        let mut r = csv::Reader::from_path(&p).unwrap();
        let h = r.headers().unwrap().clone();
        let rec = r.records().next().unwrap().unwrap();
        let get = |k: &str| rec.get(h.iter().position(|c| c == k).unwrap()).unwrap().to_string();
        assert_eq!(get("model"), "resnet");
        assert_eq!(get("status"), "ok");
        assert_eq!(get("final_acc"), "0.5");
        assert_eq!(get("nev"), "false");
        assert_eq!(get("layers"), "a;b");
        assert_eq!(get("acc_loss"), "");
        assert_eq!(h.len(), 2 + 1 + 3 + crate::metric_columns(Kind::Restart).len() + 1);
    }

    #[test]
    fn columns_no_run_of_a_kind_fills_are_left_out() {
        let cols = |k| crate::metric_columns(k);
        assert!(cols(Kind::Train).contains(&"faults") && !cols(Kind::Train).contains(&"peak_abs") && !cols(Kind::Train).contains(&"bits"));
        assert!(
            cols(Kind::Restart).contains(&"peak_abs") && cols(Kind::Restart).contains(&"bits") && !cols(Kind::Restart).contains(&"faults")
        );
        assert!(!cols(Kind::Eval).contains(&"steps") && cols(Kind::Eval).contains(&"bits"));
        for k in [Kind::Train, Kind::Restart, Kind::Eval] {
            assert!(["final_acc", "nev", "ev_injected", "collapsed", "digest", "golden_key"].iter().all(|c| cols(k).contains(c)), "{k:?}");
        }
    }
}
