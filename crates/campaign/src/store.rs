//! The record of finished runs: `runs.jsonl` is the record (one JSON object per line, appended
//! and flushed as each run ends); `runs.csv` holds the same rows and is rebuilt from it when a
//! campaign resumes or campaigns are merged (and read back, where `runs.jsonl` is absent, by
//! `csv_record`).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::spec::GridRun;
use crate::{Campaign, Error, Kind, Metrics, Result, Status};

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
    /// The CSV header for rows with these axis keys: the run's fields by their serde names,
    /// with the grid's axes after `index` and the metric columns a campaign of `kind` fills.
    pub fn header(axes: &[String], kind: Kind) -> Result<Vec<String>> {
        let mut h = vec!["id".to_string(), "index".into()];
        h.extend(axes.iter().cloned());
        h.extend(["seed".to_string(), "rep".into(), "status".into()]);
        h.extend(crate::metric_columns(kind)?);
        h.push("message".into());
        Ok(h)
    }

    /// This row's CSV fields under `header` (a [`Row::header`] of `axes`): each column's value looked up by its name,
    /// an axis in the coordinates and every other column in the row's serde record (so a
    /// column and its value cannot be paired by position), empty where the run has none.
    pub fn fields(&self, header: &[String], axes: &[String]) -> Result<Vec<String>> {
        let record = serde_json::to_value(self).map_err(|source| Error::Json { what: format!("run {}", self.id), source })?;
        let text = |v: &serde_json::Value| match v {
            serde_json::Value::Null => String::new(),
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        Ok(header
            .iter()
            .map(|c| if axes.contains(c) { self.coords.get(c).cloned().unwrap_or_default() } else { text(&record[c.as_str()]) })
            .collect())
    }
}

/// Whether `row` is a run of `campaign`'s grid: its index is in the grid, and its id,
/// coordinates, seed and repetition are that index's. Says what differs, without resolving the
/// run.
fn check_row(campaign: &Campaign, row: &Row) -> std::result::Result<(), String> {
    let GridRun { id, coords, seed, rep } = campaign.run_at(row.index)?;
    let same_coords = coords.len() == row.coords.len() && coords.iter().all(|(k, l)| row.coords.get(k) == Some(l));
    if row.id != id || !same_coords || row.seed != seed || row.rep != rep {
        let want: Vec<String> = coords.iter().map(|(k, l)| format!("{k} = {l}")).collect();
        return Err(format!(
            "run {} is not grid index {}'s run ({id}: {}, seed {seed}, repetition {rep}); the row was not written by this campaign",
            row.id,
            row.index,
            want.join(", ")
        ));
    }
    Ok(())
}

/// Reads `runs.jsonl` of `campaign`, checking each row before it is trusted: a line that is not
/// a run record, a row that is not a run of the grid ([`check_row`]: its grid index
/// outside the grid, or its id, coordinates, seed or repetition not that index's), or a second
/// row of one grid index with another result, is an error naming the file and the line. The
/// same record twice is kept once, so the rows returned hold each grid index at most once, in
/// the order first recorded. A missing file holds no rows.
///
/// The last line may lack its newline (the campaign was killed while writing it). When it
/// parses as a whole row it is kept, and with `repair` its newline is written, so that the next
/// row appended starts a line of its own. When it does not, a warning names the file and the
/// line, its run counts as missing (`campaign --resume` runs it again), and with `repair` the
/// cut line is removed from the file: it is never dropped without a word.
pub fn read_rows(path: &Path, campaign: &Campaign, repair: bool) -> Result<Vec<Row>> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    let text = String::from_utf8_lossy(&bytes[..complete]);
    let mut lines: Vec<(usize, Row)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str(line).map_err(|source| Error::Record { path: path.to_path_buf(), line: i + 1, source })?;
        lines.push((i + 1, row));
    }
    if let Some(row) = last_line(path, &bytes, complete, text.lines().count() + 1, repair)? {
        lines.push(row);
    }
    checked_once(path, campaign, lines)
}

/// The rows of `lines` (each with its line in `path`), each checked against `campaign`'s grid
/// ([`check_row`]) and kept once: the same record twice is kept once, in the order first
/// recorded, and a second row of one grid index with another result is an error naming the
/// file and the line.
pub(crate) fn checked_once(path: &Path, campaign: &Campaign, lines: Vec<(usize, Row)>) -> Result<Vec<Row>> {
    let mut first: HashMap<u64, (usize, usize)> = HashMap::new();
    let mut rows: Vec<Row> = Vec::new();
    for (line, row) in lines {
        check_row(campaign, &row).map_err(|why| Error::Row { path: path.to_path_buf(), line, why })?;
        match first.get(&row.index).copied() {
            Some((_, k)) if same_result(&rows[k], &row) => {}
            Some((at, _)) => {
                return Err(Error::Row {
                    path: path.to_path_buf(),
                    line,
                    why: format!("grid index {} is recorded again with another result (first on line {at})", row.index),
                });
            }
            None => {
                first.insert(row.index, (line, rows.len()));
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// The last line of `runs.jsonl` when it lacks its newline (`bytes[complete..]`, line
/// `number`): the row it holds, if it parses as one (with `repair`, the file gets its newline);
/// else `None`, after a warning (with `repair`, the line is cut from the file).
fn last_line(path: &Path, bytes: &[u8], complete: usize, number: usize, repair: bool) -> Result<Option<(usize, Row)>> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let tail = &bytes[complete..];
    if tail.is_empty() {
        return Ok(None);
    }
    let parsed =
        std::str::from_utf8(tail).map_err(|e| e.to_string()).and_then(|t| serde_json::from_str::<Row>(t).map_err(|e| e.to_string()));
    let blank = tail.iter().all(u8::is_ascii_whitespace);
    if repair {
        // Never through a link, symbolic or hard, as every output of a campaign.
        resilab_runner::files::own_copy(path)?;
        let open = |o: &mut std::fs::OpenOptions| resilab_runner::files::open_no_follow(path, o);
        if parsed.is_ok() {
            let mut f = open(std::fs::OpenOptions::new().append(true))?;
            f.write_all(b"\n").and_then(|()| f.sync_all()).map_err(io)?;
        } else {
            let f = open(std::fs::OpenOptions::new().write(true))?;
            f.set_len(complete as u64).and_then(|()| f.sync_all()).map_err(io)?;
        }
    }
    match parsed {
        Ok(row) => Ok(Some((number, row))),
        Err(_) if blank => Ok(None),
        Err(e) => {
            let what = if repair {
                "it is removed, and this --resume runs its run again"
            } else {
                "its run counts as missing (`campaign --resume` runs it again)"
            };
            eprintln!(
                "resilab: warning: {} line {number}: the last line is cut short ({} bytes, no newline at its end) and is not a whole run ({e}): {what}",
                path.display(),
                tail.len()
            );
            Ok(None)
        }
    }
}

/// Writes `rows` as CSV to `path` (atomically), one column per axis key.
pub fn write_csv(path: &Path, axes: &[String], kind: Kind, rows: &[Row]) -> Result<()> {
    resilab_runner::write_atomic(path, &csv_bytes(path, axes, kind, rows)?)?;
    Ok(())
}

/// `rows` as the CSV file `path`.
pub(crate) fn csv_bytes(path: &Path, axes: &[String], kind: Kind, rows: &[Row]) -> Result<Vec<u8>> {
    let mut w = resilab_text::CsvWriter::from_writer(Vec::new());
    let csv_err = |source: csv::Error| Error::Csv { path: path.to_path_buf(), source };
    let header = Row::header(axes, kind)?;
    w.write_record(&header).map_err(csv_err)?;
    for r in rows {
        w.write_record(r.fields(&header, axes)?).map_err(csv_err)?;
    }
    w.into_inner().map_err(|e| Error::Io { path: path.to_path_buf(), source: e })
}

/// `rows` as `runs.jsonl`: one JSON object per line.
pub(crate) fn jsonl_bytes(rows: &[Row]) -> Result<Vec<u8>> {
    let mut jsonl = Vec::new();
    for r in rows {
        jsonl.extend(serde_json::to_vec(r).map_err(|source| Error::Json { what: format!("run {}", r.id), source })?);
        jsonl.push(b'\n');
    }
    Ok(jsonl)
}

/// Appends rows to an open `runs.jsonl` and `runs.csv`, flushing each.
pub(crate) struct Appender {
    jsonl: std::fs::File,
    csv: resilab_text::CsvWriter<std::fs::File>,
    axes: Vec<String>,
    /// The file's columns.
    header: Vec<String>,
    dir: std::path::PathBuf,
}

impl Appender {
    /// Opens both files in `dir` for appending (the CSV must already have its header).
    pub(crate) fn open(dir: &Path, axes: Vec<String>, kind: Kind) -> Result<Self> {
        let open = |name: &str| resilab_runner::files::append_output(&dir.join(name));
        let csv = resilab_text::CsvWriter::without_headers(open(crate::RUNS_CSV)?);
        let header = Row::header(&axes, kind)?;
        Ok(Self { jsonl: open(crate::RUNS_JSONL)?, csv, axes, header, dir: dir.to_path_buf() })
    }

    /// Appends one row to both files.
    pub(crate) fn append(&mut self, row: &Row) -> Result<()> {
        let p = self.dir.join(crate::RUNS_JSONL);
        let line = serde_json::to_string(row).map_err(|source| Error::Json { what: format!("run {}", row.id), source })?;
        writeln!(self.jsonl, "{line}").map_err(|source| Error::Io { path: p.clone(), source })?;
        self.jsonl.flush().map_err(|source| Error::Io { path: p, source })?;
        let p = self.dir.join(crate::RUNS_CSV);
        self.csv.write_record(row.fields(&self.header, &self.axes)?).map_err(|source| Error::Csv { path: p.clone(), source })?;
        self.csv.flush().map_err(|source| Error::Io { path: p, source })
    }
}

/// Whether two records of one run agree on everything but the time they took and the steps
/// the shortcut took from the golden run (a run gives the same results either way).
pub(crate) fn same_result(a: &Row, b: &Row) -> bool {
    let strip = |r: &Row| {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            for &k in crate::WALL_CLOCK_COLUMNS.iter().chain(&["shortcut_prefix_steps", "shortcut_remainder_steps"]) {
                o.remove(k);
            }
        }
        v
    };
    strip(a) == strip(b)
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
    fn rows_that_differ_only_in_time_and_shortcut_are_the_same_result() {
        let a = row("r");
        let mut b = row("r");
        b.metrics.wall_s = Some(9.0);
        b.metrics.shortcut_prefix_steps = Some(12);
        b.metrics.shortcut_remainder_steps = Some(3);
        assert!(same_result(&a, &b));
        b.metrics.final_acc = Some(0.25);
        assert!(!same_result(&a, &b));
    }

    /// The spec tests' 24-run campaign, and its run `index` recorded as `ok`.
    fn grid_row(c: &Campaign, index: u64) -> Row {
        let spec = c.run(index).unwrap();
        Row {
            id: spec.id,
            index,
            coords: spec.coords.into_iter().collect(),
            seed: spec.seed,
            rep: spec.rep,
            status: Status::Ok,
            message: None,
            metrics: Metrics { final_acc: Some(0.5), ..Metrics::default() },
        }
    }

    fn small() -> Campaign {
        Campaign::parse(crate::spec::tests::SMALL, &[], "t").unwrap()
    }

    fn lines(rows: &[Row]) -> String {
        rows.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
    }

    #[test]
    fn a_last_line_without_its_newline_is_kept_when_whole_and_given_its_newline_by_repair() {
        let (dir, c) = (tempfile::tempdir().unwrap(), small());
        let p = dir.path().join("runs.jsonl");
        let full = lines(&[grid_row(&c, 0), grid_row(&c, 1)]);
        std::fs::write(&p, full.trim_end()).unwrap();
        let rows = read_rows(&p, &c, false).unwrap();
        assert_eq!(rows.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), full.trim_end(), "read without repair, untouched");
        assert_eq!(read_rows(&p, &c, true).unwrap(), rows);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), full, "repaired: the next row starts a line of its own");
    }

    #[test]
    fn a_last_line_cut_short_counts_as_missing_and_repair_removes_it() {
        let (dir, c) = (tempfile::tempdir().unwrap(), small());
        let p = dir.path().join("runs.jsonl");
        let full = lines(&[grid_row(&c, 0), grid_row(&c, 1)]);
        std::fs::write(&p, format!("{full}{{\"id\":\"c\",\"ind")).unwrap();
        assert_eq!(read_rows(&p, &c, false).unwrap().len(), 2);
        assert!(std::fs::read_to_string(&p).unwrap().ends_with("\"ind"), "read without repair, untouched");
        let rows = read_rows(&p, &c, true).unwrap();
        assert_eq!(rows.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), full);
        assert_eq!(rows[0], grid_row(&c, 0));
    }

    #[test]
    fn rows_that_are_not_runs_of_the_grid_are_refused_naming_file_line_and_index() {
        let (dir, c) = (tempfile::tempdir().unwrap(), small());
        let p = dir.path().join("runs.jsonl");
        let mut outside = grid_row(&c, 1);
        outside.index = 1_000_000_000;
        std::fs::write(&p, lines(&[grid_row(&c, 0), outside.clone()])).unwrap();
        let e = read_rows(&p, &c, false).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{} line 2: grid index 1000000000 is outside the grid", p.display())) && e.contains("24 runs"),
            "{e}"
        );
        // The same outside the grid on a last line without its newline: refused too.
        std::fs::write(&p, lines(&[grid_row(&c, 0), outside]).trim_end()).unwrap();
        assert!(read_rows(&p, &c, true).unwrap_err().to_string().contains("line 2: grid index 1000000000"));
        // In the grid, but another index's run.
        let mut moved = grid_row(&c, 1);
        moved.index = 2;
        std::fs::write(&p, lines(&[grid_row(&c, 0), moved])).unwrap();
        let e = read_rows(&p, &c, false).unwrap_err().to_string();
        assert!(e.contains("line 2: run ") && e.contains("is not grid index 2's run"), "{e}");
        std::fs::write(&p, "{\"id\": 3}\n").unwrap();
        let e = read_rows(&p, &c, false).unwrap_err();
        assert_eq!(e.to_string(), format!("{} line 1: not a run record", p.display()));
        assert!(resilab_runner::one_line(&e).contains("not a run record: invalid type"), "the cause follows once");
    }

    #[test]
    fn a_run_recorded_twice_is_kept_once_or_refused_when_its_results_differ() {
        let (dir, c) = (tempfile::tempdir().unwrap(), small());
        let p = dir.path().join("runs.jsonl");
        let mut slower = grid_row(&c, 1);
        slower.metrics.wall_s = Some(9.0);
        std::fs::write(&p, lines(&[grid_row(&c, 0), grid_row(&c, 1), slower.clone()])).unwrap();
        assert_eq!(read_rows(&p, &c, false).unwrap().len(), 2);
        let mut other = slower;
        other.metrics.final_acc = Some(0.25);
        std::fs::write(&p, lines(&[grid_row(&c, 0), grid_row(&c, 1), other])).unwrap();
        let e = read_rows(&p, &c, false).unwrap_err().to_string();
        assert!(e.contains("line 3: grid index 1 is recorded again with another result (first on line 2)"), "{e}");
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
        assert_eq!(get("final_acc_frac"), "0.5");
        assert_eq!(get("nev"), "false");
        assert_eq!(get("layers"), "a;b");
        assert_eq!(get("acc_loss_frac"), "");
        assert_eq!(h.len(), 2 + 1 + 3 + crate::metric_columns(Kind::Restart).unwrap().len() + 1);
    }

    #[test]
    fn every_metric_column_is_a_field_of_the_run_record() {
        // A misspelt column would be written empty for every run: each must be a key of the
        // record's JSON, and every key a column of some kind.
        let record = serde_json::to_value(Metrics::default()).unwrap();
        let keys: Vec<&String> = record.as_object().unwrap().keys().collect();
        let mut all: Vec<String> = Vec::new();
        for k in [Kind::Train, Kind::Restart, Kind::Eval] {
            all.extend(crate::metric_columns(k).unwrap());
        }
        for c in &all {
            assert!(keys.contains(&c), "runs.csv column {c} is no field of a run record");
        }
        for k in keys {
            assert!(all.contains(k), "the run record's {k} is no column of runs.csv");
        }
    }

    #[test]
    fn columns_no_run_of_a_kind_fills_are_left_out() {
        let has = |k, c: &str| crate::metric_columns(k).unwrap().iter().any(|m| m == c);
        assert!(has(Kind::Train, "faults") && !has(Kind::Train, "peak_abs") && has(Kind::Train, "bits") && has(Kind::Train, "words"));
        assert!(has(Kind::Restart, "peak_abs") && has(Kind::Restart, "bits") && !has(Kind::Restart, "faults"));
        assert!(
            !has(Kind::Eval, "steps")
                && has(Kind::Eval, "bits")
                && !has(Kind::Eval, "words")
                && !has(Kind::Restart, "scaler_skipped_faults")
        );
        for k in [Kind::Train, Kind::Restart, Kind::Eval] {
            assert!(["final_acc_frac", "nev", "ev_injected", "collapsed", "digest", "golden_key"].iter().all(|c| has(k, c)), "{k:?}");
        }
    }
}
