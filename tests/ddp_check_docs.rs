//! docs/parallel.md's table of the checks against PyTorch ("Checked against PyTorch") holds the
//! figures of `results/parallel/ddp_check.csv`, the committed output of `scripts/ddp-check.sh
//! --out`: for each row, the largest difference per tensor kind over the checks its first cell
//! names (a pattern with `*`), the bound where a flip raised it, and what the ReLU allowance
//! excused. A figure typed by hand, or a rerun that moved one, fails here.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::collections::BTreeSet;
use std::path::Path;

/// One row of ddp_check.csv.
struct Row {
    check: String,
    kind: String,
    diff: f64,
    bound: f64,
    excused: u64,
    excused_diff: f64,
}

fn rows() -> Vec<Row> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/parallel/ddp_check.csv");
    let mut r = csv::Reader::from_path(&path).unwrap();
    let h = r.headers().unwrap().clone();
    let col = |name: &str| h.iter().position(|x| x == name).unwrap_or_else(|| panic!("{}: no column {name}", path.display()));
    let (check, kind, diff, bound, excused, excused_diff) =
        (col("check"), col("kind"), col("max_rel_diff"), col("bound"), col("excused"), col("excused_max_rel_diff"));
    r.records()
        .map(|x| {
            let x = x.unwrap();
            Row {
                check: x[check].to_string(),
                kind: x[kind].to_string(),
                diff: x[diff].parse().unwrap(),
                bound: x[bound].parse().unwrap(),
                excused: x[excused].parse().unwrap(),
                excused_diff: x[excused_diff].parse().unwrap(),
            }
        })
        .collect()
}

/// Whether `name` matches `pattern`, whose `*` stands for any run of characters.
fn matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return name == pattern;
    }
    if !name.starts_with(first) || !name[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// The cell for one tensor kind over `rows`: the largest difference, with its bound where a
/// flip raised it above 1e-5.
fn kind_cell(rows: &[&Row], kind: &str) -> String {
    let worst = rows.iter().filter(|r| r.kind == kind).max_by(|a, b| a.diff.total_cmp(&b.diff)).unwrap();
    if worst.bound.is_finite() && (worst.bound - 1e-5).abs() > 1e-12 {
        format!("{:.1e} (bound {:.1e})", worst.diff, worst.bound)
    } else {
        format!("{:.1e}", worst.diff)
    }
}

/// The ReLU allowance's cell: how many comparisons it excused, and the largest of them.
fn excused_cell(rows: &[&Row]) -> String {
    let n: u64 = rows.iter().map(|r| r.excused).sum();
    let largest = rows.iter().map(|r| r.excused_diff).fold(0.0, f64::max);
    if n == 0 { "none".to_string() } else { format!("{n}, up to {largest:.1e}") }
}

#[test]
fn the_table_of_checks_against_pytorch_is_the_committed_csv() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/parallel.md")).unwrap();
    let csv = rows();
    let header = "| check | what PyTorch runs | weights | BatchNorm buffers | momentum | excused by the ReLU allowance |";
    let table = doc.split(header).nth(1).unwrap_or_else(|| panic!("docs/parallel.md has no table headed {header}"));
    let mut covered = BTreeSet::new();
    for line in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 6, "{line}");
        let pattern = cells[0].split('`').nth(1).unwrap_or_else(|| panic!("no `check` pattern in {line}"));
        let matched: Vec<&Row> = csv.iter().filter(|r| matches(pattern, &r.check)).collect();
        assert!(!matched.is_empty(), "{pattern} names no check of ddp_check.csv");
        covered.extend(matched.iter().map(|r| r.check.clone()));
        for (cell, kind) in cells[2..5].iter().zip(["weights", "buffers", "momentum"]) {
            assert_eq!(*cell, kind_cell(&matched, kind), "{pattern}, {kind}: docs/parallel.md against results/parallel/ddp_check.csv");
        }
        assert_eq!(cells[5], excused_cell(&matched), "{pattern}: the ReLU allowance's cell");
    }
    let all: BTreeSet<String> = csv.iter().map(|r| r.check.clone()).collect();
    assert_eq!(covered, all, "every check of ddp_check.csv has a row in docs/parallel.md's table");
}

#[test]
fn patterns_match_whole_names() {
    assert!(matches("crash-4-k*-rollback", "crash-4-k1-rollback"));
    assert!(!matches("crash-4-k*-rollback", "crash-8-k1-rollback"));
    assert!(matches("crash-8-*", "crash-8-k3-lossy_forward"));
    assert!(matches("ddp-4", "ddp-4") && !matches("ddp-4", "ddp-free-4"));
    assert!(matches("*-4", "gpipe-4") && !matches("*-4", "gpipe-2"));
}
