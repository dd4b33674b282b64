//! docs/metrics.md's "Columns of the report's files" against what a report writes: every column
//! of `cells.csv`, `comparisons.csv` (both forms), `bits.csv`, `cells_study.csv` and
//! `which_strategy.csv` is documented there, in the file's order, and every documented column is
//! written. The written columns are the row structs' serde field names
//! ([`resilab_report::csv_columns`]), the same that head the files.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::collections::BTreeMap;

use common::units::{covered, metrics_section, table, unit_word};

/// The section's tables: per heading (`cells.csv`, `comparisons.csv of a study`), each column
/// with its unit, in order.
fn documented() -> BTreeMap<String, Vec<(String, String)>> {
    let section = metrics_section("Columns of the report's files");
    let mut files = BTreeMap::new();
    for part in section.split("\n### ").skip(1) {
        let heading = part.lines().next().unwrap().replace('`', "");
        let mut columns = Vec::new();
        for line in part.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.split(" | ").collect();
            assert!(cells.len() >= 3, "docs/metrics.md, {heading}: {line:?} is not `| column | unit | meaning |`");
            let name = cells[0].trim_start_matches("| ").trim_matches('`');
            assert!(!name.contains(['`', ',', ' ']), "docs/metrics.md, {heading}: one column a line, not {:?}", cells[0]);
            columns.push((name.to_string(), cells[1].to_string()));
        }
        assert!(files.insert(heading.clone(), columns).is_none(), "docs/metrics.md has two tables of {heading}");
    }
    files
}

/// What differs between a file's documented columns and its written ones: columns written but
/// not documented, documented but not written, and then the order.
fn problems(file: &str, documented: &[String], written: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for c in written.iter().filter(|c| !documented.contains(c)) {
        out.push(format!("{file}: column {c} is written but not documented"));
    }
    for c in documented.iter().filter(|c| !written.contains(c)) {
        out.push(format!("{file}: column {c} is documented but not written"));
    }
    if out.is_empty() && documented != written {
        out.push(format!("{file}: documented in the order {documented:?}, written in the order {written:?}"));
    }
    out
}

#[test]
fn every_column_the_report_writes_is_documented_and_every_documented_column_is_written() {
    let docs = documented();
    let written = resilab_report::csv_columns().unwrap();
    let mut all = Vec::new();
    for (file, columns) in &written {
        let doc: Vec<String> = docs.get(*file).map(|d| d.iter().map(|c| c.0.clone()).collect()).unwrap_or_default();
        assert!(docs.contains_key(*file), "docs/metrics.md has no table of {file}");
        all.extend(problems(file, &doc, columns));
    }
    for heading in docs.keys() {
        assert!(written.iter().any(|(f, _)| f == heading), "docs/metrics.md documents {heading}, which a report does not write");
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
    assert!(written.iter().map(|(_, c)| c.len()).sum::<usize>() > 130, "{written:?}");
}

#[test]
fn a_documented_accuracy_or_overhead_column_has_the_unit_of_the_unit_table() {
    let units = table();
    for (file, columns) in documented() {
        for (name, unit) in columns.iter().filter(|(name, _)| covered(name)) {
            let want = units.get(name).unwrap_or_else(|| panic!("{file}: {name} is not in docs/metrics.md's unit table"));
            assert_eq!(unit_word(unit), Some(want.as_str()), "{file}: {name} is documented in {unit:?}, the unit table says {want}");
        }
    }
}

#[test]
fn the_check_tells_a_missing_an_extra_and_a_misordered_column_apart() {
    let v = |s: &[&str]| s.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    assert!(problems("x.csv", &v(&["a", "b"]), &v(&["a", "b"])).is_empty());
    let p = problems("x.csv", &v(&["a", "b"]), &v(&["a", "c"]));
    assert_eq!(p, ["x.csv: column c is written but not documented", "x.csv: column b is documented but not written"]);
    assert_eq!(problems("x.csv", &v(&["a", "b"]), &v(&["b", "a"])).len(), 1);
    assert_eq!(problems("x.csv", &v(&["a"]), &v(&["a", "b"])).len(), 1);
}
