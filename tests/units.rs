//! One unit per column name (docs/metrics.md, "Units: one per column name"), held for every
//! committed CSV under `results/`; tests/campaign.rs and tests/recovery.rs hold it for the
//! campaign reports, `compare` tables and summaries they generate.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;

use common::units::{check_csv, check_dir, check_name, covered, table};

#[test]
fn every_committed_csv_names_its_accuracy_and_overhead_units() {
    let t = table();
    let n = check_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("results"), &t);
    assert!(n > 60, "{n} files");
}

#[test]
fn the_rule_catches_a_name_in_two_units_a_fraction_in_a_percent_column_and_an_undocumented_column() {
    let t = table();
    assert!(covered("acc_loss") && covered("time_overhead_vs_golden") && !covered("accr") && !covered("accr_all_pct"));
    let fails = |f: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();
    // The old names: `acc_loss` was a fraction in runs.csv and points in cells.csv.
    assert!(fails(&|| check_name("x.csv", "acc_loss", &t)));
    assert!(fails(&|| check_name("x.csv", "golden_acc", &t)));
    check_name("x.csv", "acc_loss_pts", &t);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    check_csv(&write("ok.csv", "model,acc_pct,final_acc_frac\nr,81.5,0.815\n"), &t);
    assert!(fails(&|| check_csv(&write("frac.csv", "model,final_acc_frac\nr,81.5\n"), &t)));
    assert!(fails(&|| check_csv(&write("pct.csv", "model,acc_pct\nr,181.5\n"), &t)));
    assert!(fails(&|| check_csv(&write("cmp.csv", "axis,metric,diff\nmodel,acc,1.0\n"), &t)));
    check_csv(&write("cmp2.csv", "axis,metric,diff\nmodel,acc_loss_pts,1.0\n"), &t);
}

/// A crash of worker 1 at step 5 of the tiny 2-worker run, with the crash costs scaled to its
/// millisecond steps: `none` fails there, the other strategies recover.
const CRASH: &str = "[[fault]]\ntarget = \"crash\"\nat_step = 5\nworker = 1\n";

/// Names that are no accuracy, overhead, time or count, or a count named by what it counts
/// (runs, seeds, faults, ...), in the report's and `compare`'s files.
const NOT_A_QUANTITY: &[&str] = &[
    "id",
    "strategy",
    "job",
    "status",
    "actions",
    "collapsed",
    "runs",
    "ok",
    "not_ok",
    "seeds",
    "faults",
    "detections",
    "restarts",
    "condition",
    "word",
    "target",
    "field",
    "bits",
    "option",
    "choice",
    "decided",
    "chosen",
    "groups",
    "groups_needed",
    "needed_for",
    "ruled_out",
    "hypothesis",
    "metric",
    "test",
    "a",
    "b",
    "n_a",
    "n_b",
    "n_pairs",
    "verdict",
    "nev_vs_ev",
    "axis",
    "fixed",
    "precision",
    "bit",
    "cv",
    "replica_divergence",
    "p",
    "p_holm",
    "wilcoxon_p",
    "nev_vs_ev_p",
    "nev_vs_ev_p_holm",
    "nan",
    "key",
    "cheaper_below",
    "cheaper_above",
    "outcome",
    "outcomes",
    "detector",
    "setting",
    "harmed",
    "alarmed",
];

/// Whether column `i` of `header` names its unit: a unit suffix (`_frac`, `_pct`, `_pts`, `_s`,
/// `_steps`) or the word `steps`; an interval end (`_lo`, `_hi`) after a column that does; the
/// count of a share beside its `_pct`; a grid axis (a dotted key); in a file with a `metric`
/// column, the values it names the unit of; or a name on [`NOT_A_QUANTITY`].
fn names_its_unit(header: &[String], i: usize) -> bool {
    let name = header[i].as_str();
    let unit = |n: &str| ["_frac", "_pct", "_pts", "_s", "_steps"].iter().any(|u| n.ends_with(u)) || n.split('_').any(|w| w == "steps");
    if unit(name) || NOT_A_QUANTITY.contains(&name) || name.contains('.') || header.contains(&format!("{name}_pct")) {
        return true;
    }
    if header.iter().any(|h| h == "metric") && ["value_a", "value_b", "diff", "ci_lo", "ci_hi", "detectable"].contains(&name) {
        return true;
    }
    if name.ends_with("_lo") || name.ends_with("_hi") {
        return header[..i].iter().rev().find(|h| !h.ends_with("_lo") && !h.ends_with("_hi")).is_some_and(|h| unit(h));
    }
    false
}

/// The columns of `header` (of `file`) that do not name their unit.
fn unitless(file: &str, header: &[String]) -> Vec<String> {
    (0..header.len()).filter(|&i| !names_its_unit(header, i)).map(|i| format!("{file}: {}", header[i])).collect()
}

fn header_of(path: &Path) -> Vec<String> {
    let mut rd = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    rd.headers().unwrap().iter().map(String::from).collect()
}

#[test]
fn every_column_a_report_can_write_names_its_unit() {
    let bad: Vec<String> = resilab_report::csv_columns().unwrap().into_iter().flat_map(|(file, header)| unitless(file, &header)).collect();
    assert!(bad.is_empty(), "columns without a unit: {bad:?}");
    // The rule tells a name without its unit apart.
    let h = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(!names_its_unit(&h(&["detection_latency"]), 0));
    assert!(!names_its_unit(&h(&["final_test_acc"]), 0));
    assert!(!names_its_unit(&h(&["std", "std_lo"]), 1));
    assert!(names_its_unit(&h(&["nev", "nev_pct", "nev_lo"]), 0) && names_its_unit(&h(&["nev", "nev_pct", "nev_lo"]), 2));
}

#[test]
fn compare_writes_units_and_gives_a_failed_run_no_accuracy_loss() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[parallel]\nworkers = 2\n[checkpoint]\nevery_steps = 3\nkeep_last = 0\n\n{CRASH}\n[recovery]\nstrategy = \"none\"\n",
        common::TINY
    );
    let cfg = common::write(dir.path(), "compare.toml", &text);
    let out = dir.path().join("cmp");
    let golden = dir.path().join("golden");
    let o = common::run(&[
        "compare",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--golden-dir",
        golden.to_str().unwrap(),
        "--strategies",
        "none,lossy_forward",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let header = header_of(&out.join("strategies.csv"));
    let bad = unitless("strategies.csv", &header);
    assert!(bad.is_empty(), "columns without a unit: {bad:?}");
    let rows = common::csv_records(&out.join("strategies.csv"));
    let none = rows.iter().find(|r| r["strategy"] == "none").unwrap();
    assert_eq!(none["status"], "failed");
    assert_eq!(none["acc_loss_frac"], "", "a failed run has no accuracy loss: {none:?}");
    let lossy = rows.iter().find(|r| r["strategy"] == "lossy_forward").unwrap();
    assert!(lossy["acc_loss_frac"].parse::<f64>().is_ok(), "{lossy:?}");
    let table = std::fs::read_to_string(out.join("table.txt")).unwrap();
    let line = table.lines().find(|l| l.starts_with("none ")).unwrap();
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[3], "-", "the table's acc loss of a failed run: {line}");
}

#[test]
fn a_study_report_names_its_units_embeds_each_condition_and_draws_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[campaign]
kind = "train"
seeds = [3]
repetitions = 2
timeout_s = 120

[[campaign.hypothesis]]
name = "lossy forward costs less than rollback"
metric = "sim_overhead"
a = "rollback"
b = "lossy_forward"

[base]
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 16, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 8, batch_size = 32, eval_every = 2 }
parallel = { workers = 2 }
checkpoint = { every_steps = 3 }

[[base.fault]]
target = "crash"
at_step = 5
worker = 1

[grid]
"recovery.strategy" = ["none", "rollback", "lossy_forward"]
"parallel.compute.gflops" = [20.0, 40.0]
"#;
    let out = common::finished_campaign(dir.path(), "study", text, &[]);
    let o = common::run(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = out.join("report");
    let report = if report.is_dir() { report } else { out.clone() };
    let mut bad = Vec::new();
    for file in ["cells.csv", "cells_study.csv", "comparisons.csv", "which_strategy.csv"] {
        bad.extend(unitless(file, &header_of(&report.join(file))));
    }
    assert!(bad.is_empty(), "columns without a unit: {bad:?}");
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    // One Pareto plot per condition, embedded and captioned by its condition.
    for (i, gflops) in ["20", "40"].iter().enumerate() {
        let png = format!("plots/pareto_{i:02}.png");
        let line = md.lines().find(|l| l.contains(&png)).unwrap_or_else(|| panic!("{png} is not in report.md:\n{md}"));
        assert!(line.contains(&format!("gflops={gflops}")), "{line}");
    }
    // `none` fails at its crash: its accuracy curve is drawn until it stopped, not left out.
    assert!(md.contains("a failed run until it stopped"), "{md}");
    assert!(!md.contains("left out: failed"), "{md}");
    // The report's accuracy loss of `none` is that of cells_study.csv: failed runs have none.
    let cells = common::csv_records(&report.join("cells.csv"));
    let study = common::csv_records(&report.join("cells_study.csv"));
    for c in &cells {
        let s = study
            .iter()
            .find(|s| s["option"] == c["recovery.strategy"] && s["condition"].contains(&format!("={}", c["parallel.compute.gflops"])))
            .unwrap();
        let num = |v: &str| v.parse::<f64>().ok().map(|x| (x * 100.0).round() / 100.0);
        assert_eq!(num(&c["acc_loss_pts"]), num(&s["acc_loss_pts"]), "{c:?} against {s:?}");
    }
}
