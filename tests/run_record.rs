//! One record per run, one serde struct per file kind: `runs.csv`'s metric columns are the
//! fields of `resilab_campaign::Metrics` (docs/metrics.md's table of them lists every one, in
//! order, with the kinds whose runs fill it), `faults.csv`'s are those of `FaultRow`, and every
//! committed `runs.csv` and `faults.csv` under `results/` reads into those structs by its
//! columns' names and writes back byte for byte. A committed `summary.json`'s `status` reads as
//! a `RunStatus`. A metric added to the record (`checkpoint_bytes`) reaches `runs.csv` from the
//! run's `summary.json`.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::{Path, PathBuf};

use resilab_campaign::{Campaign, FaultRow, Kind, header, metric_columns, read_csv_rows, read_faults_csv};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file named `name` under `dir`, at any depth, in path order.
fn files_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            found.extend(files_named(&p, name));
        } else if p.file_name().is_some_and(|f| f == name) {
            found.push(p);
        }
    }
    found
}

/// docs/metrics.md's table of `runs.csv`'s metric columns: each column with the kinds (`R`,
/// `E`, `T`) whose cell is not empty (`✓` or `DP`), in the table's order.
fn documented_columns() -> Vec<(String, Vec<Kind>)> {
    let doc = std::fs::read_to_string(root().join("docs/metrics.md")).unwrap();
    let section = doc.split("## The evidence columns of `runs.csv`").nth(1).unwrap();
    let section = section.split("\n## ").next().unwrap();
    let mut columns = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let name = line.split(" | ").next().unwrap().trim_start_matches("| ").trim_matches('`').to_string();
        // The last three cells, from the right (a meaning may hold a `|`).
        let mut marks: Vec<&str> = line.trim_end().trim_end_matches('|').rsplit('|').take(3).map(str::trim).collect();
        marks.reverse();
        let kinds = [Kind::Restart, Kind::Eval, Kind::Train].into_iter().zip(marks).filter(|(_, m)| !m.is_empty());
        columns.push((name, kinds.map(|(k, _)| k).collect()));
    }
    columns
}

#[test]
fn docs_list_every_metric_column_in_order_with_the_kinds_that_fill_it() {
    let documented = documented_columns();
    let names: Vec<&str> = documented.iter().map(|(n, _)| n.as_str()).collect();
    let fields = header::<resilab_campaign::Metrics>().unwrap();
    assert_eq!(names, fields, "docs/metrics.md's runs.csv table against Metrics' fields");
    for kind in [Kind::Restart, Kind::Eval, Kind::Train] {
        let doc: Vec<&str> = documented.iter().filter(|(_, k)| k.contains(&kind)).map(|(n, _)| n.as_str()).collect();
        assert_eq!(doc, metric_columns(kind).unwrap(), "the columns of a {} campaign's runs.csv", kind.name());
    }
}

/// Fails naming `path` and its first line that `back`, the file written again, changed.
fn assert_written_back(path: &Path, text: &str, back: &str) {
    if back != text {
        let (a, b) = text.lines().zip(back.lines()).find(|(a, b)| a != b).unwrap_or_default();
        panic!("{}: written back otherwise:\n  was {a}\n  now {b}", path.display());
    }
}

#[test]
fn every_committed_runs_csv_reads_into_the_run_record_and_writes_back_unchanged() {
    let files = files_named(&root().join("results"), "runs.csv");
    assert!(files.len() >= 10, "{files:?}");
    for path in files {
        let dir = path.parent().unwrap();
        let campaign = Campaign::stored(dir).unwrap();
        let rows = read_csv_rows(&path, &campaign).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        let text = std::fs::read_to_string(&path).unwrap();
        let columns: Vec<String> = csv::Reader::from_path(&path).unwrap().headers().unwrap().iter().map(str::to_string).collect();
        assert!(!rows.is_empty(), "{}", path.display());
        // Written again under the file's own header (a committed file of an earlier revision
        // has fewer columns), each value from the record by its column's name.
        let mut w = resilab_text::CsvWriter::without_headers(Vec::new());
        w.write_record(&columns).unwrap();
        for r in &rows {
            w.write_record(r.fields(&columns, &campaign.axis_keys()).unwrap()).unwrap();
        }
        assert_written_back(&path, &text, &String::from_utf8(w.into_inner().unwrap()).unwrap());
    }
}

#[test]
fn every_committed_faults_csv_reads_into_fault_rows_and_writes_back_unchanged() {
    let files = files_named(&root().join("results"), "faults.csv");
    assert!(files.len() >= 3, "{files:?}");
    let columns = header::<FaultRow>().unwrap();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        // A committed file of an earlier revision has fewer columns (no `bits_reference` or
        // `dtype`), in the same order: it is written back under its own header.
        let own: Vec<String> = text.lines().next().unwrap().split(',').map(String::from).collect();
        let kept: Vec<&String> = columns.iter().filter(|c| own.contains(c)).collect();
        assert_eq!(own.iter().collect::<Vec<_>>(), kept, "{}: columns FaultRow does not have, or in another order", path.display());
        let rows = read_faults_csv(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display())).unwrap();
        assert!(!rows.is_empty(), "{}", path.display());
        let mut full = resilab_text::CsvWriter::without_headers(Vec::new());
        full.write_record(&columns).unwrap();
        for r in &rows {
            full.serialize(r).unwrap();
        }
        let full = full.into_inner().unwrap();
        let mut back = resilab_text::CsvWriter::without_headers(Vec::new());
        back.write_record(&own).unwrap();
        let at: Vec<usize> = own.iter().map(|c| columns.iter().position(|k| k == c).unwrap()).collect();
        for record in csv::Reader::from_reader(full.as_slice()).records() {
            let record = record.unwrap();
            back.write_record(at.iter().map(|&i| &record[i])).unwrap();
        }
        assert_written_back(&path, &text, &String::from_utf8(back.into_inner().unwrap()).unwrap());
    }
}

#[test]
fn every_committed_summary_json_has_a_run_status() {
    let files = files_named(&root().join("results"), "summary.json");
    assert!(!files.is_empty());
    for path in files {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let status: resilab_runner::RunStatus = serde_json::from_value(v["status"].clone()).unwrap();
        assert_eq!(serde_json::to_value(status).unwrap(), v["status"], "{}", path.display());
    }
}

/// A `train` campaign of one fault-free run on 2 workers, checkpointing every 3 of its 8 steps.
const CHECKPOINTING: &str = r#"
[campaign]
kind = "train"
seeds = [3]
repetitions = 1
timeout_s = 120

[base]
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 16, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 8, batch_size = 32 }
parallel = { workers = 2 }
checkpoint = { every_steps = 3 }

[grid]
"recovery.strategy" = ["rollback"]
"#;

#[test]
fn a_train_run_records_the_checkpoint_bytes_it_wrote_in_its_summary_and_runs_csv() {
    let tmp = tempfile::tempdir().unwrap();
    let out = common::finished_campaign(tmp.path(), "ckpt", CHECKPOINTING, &[]);
    let rows = common::csv_records(&out.join("runs.csv"));
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("runs").join(&row["id"]).join("summary.json")).unwrap()).unwrap();
    let (bytes, checkpoints, params) =
        (summary["checkpoint_bytes"].as_u64().unwrap(), summary["checkpoints"].as_u64().unwrap(), summary["params"].as_u64().unwrap());
    assert_eq!(row["checkpoint_bytes"], bytes.to_string(), "runs.csv's column is the summary's field");
    // Steps 3 and 6, each the same state: both workers' parameters (4 bytes each) and more.
    assert_eq!(checkpoints, 2, "{summary}");
    assert_eq!(bytes % checkpoints, 0, "{summary}");
    assert!(bytes / checkpoints >= 2 * 4 * params, "{bytes} bytes in {checkpoints} checkpoints of 2 x {params} parameters");
}
