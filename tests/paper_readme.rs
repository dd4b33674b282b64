//! `scripts/paper_readme.py` writes results/paper/README.md from the presets' reports, and
//! computes the factor study's pooled and paired tests itself. These tests hold it to that: its
//! two-proportion test (Newcombe's interval), exact McNemar test, Wilson interval and Holm
//! adjustment give the report's numbers (`resilab_report::stats`),
//! and the committed README is exactly what it generates from the committed reports (no verdict
//! edited by hand). Without python3 a test skips with a message, except under `CI=true`.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::Path;
use std::process::{Command, Output};

use resilab_report::stats;

fn python(args: &[&str]) -> Option<Output> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    match Command::new("python3").args(args).current_dir(root).output() {
        Ok(o) => Some(o),
        Err(e) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("python3 is required in CI (see .ci/run): {e}");
            }
            eprintln!("skipping: python3 is not installed ({e})");
            None
        }
    }
}

/// Cases where the tests' branches differ: a hand-computed z, a zero count, unequal sizes,
/// a pooled rate of 1 (nothing varies).
const CASES: [(u64, u64, u64, u64); 5] = [(30, 100, 45, 100), (0, 21, 5, 21), (8, 252, 60, 252), (17, 40, 3, 55), (21, 21, 21, 21)];

#[test]
fn the_generators_statistics_are_the_reports() {
    let calls: Vec<String> =
        CASES.iter().map(|(k1, n1, k2, n2)| format!("print(*p.two_proportions({k1}, {n1}, {k2}, {n2}), *p.wilson({k2}, {n2}))")).collect();
    let program = format!(
        "import sys\nsys.path.insert(0, 'scripts')\nimport paper_readme as p\n{}\nprint(*p.holm([0.01, 0.04, 0.03, 0.5]))\n",
        calls.join("\n")
    );
    let Some(o) = python(&["-c", &program]) else { return };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<Vec<f64>> = text.lines().map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect()).collect();
    assert_eq!(lines.len(), CASES.len() + 1, "{text}");
    let close = |a: f64, b: f64, what: &str| assert!((a - b).abs() <= 1e-9, "{what}: python {a}, rust {b}");
    for ((k1, n1, k2, n2), got) in CASES.iter().zip(&lines) {
        let want = stats::two_proportions(*k1, *n1, *k2, *n2).unwrap();
        let (lo, hi) = stats::wilson(*k2, *n2).unwrap();
        let case = format!("{k1}/{n1} vs {k2}/{n2}");
        close(got[0], want.diff, &format!("{case} diff"));
        close(got[1], want.ci.0, &format!("{case} ci low"));
        close(got[2], want.ci.1, &format!("{case} ci high"));
        close(got[3], want.p, &format!("{case} p"));
        close(got[4], lo, &format!("{case} wilson low"));
        close(got[5], hi, &format!("{case} wilson high"));
    }
    // The hand-computed case of the report's own test.
    assert!((lines[0][3] - 0.0284597).abs() < 1e-6);
    let holm = stats::holm(&[0.01, 0.04, 0.03, 0.5]);
    for (a, b) in lines[CASES.len()].iter().zip(&holm) {
        close(*a, *b, "holm");
    }
}

#[test]
fn the_generators_paired_test_is_the_reports() {
    let pairs = [(0u64, 0u64), (1, 9), (9, 1), (5, 5), (0, 6), (12, 31)];
    let calls: Vec<String> = pairs.iter().map(|(b, c)| format!("print(p.mcnemar_exact({b}, {c}))")).collect();
    let program = format!("import sys\nsys.path.insert(0, 'scripts')\nimport paper_readme as p\n{}\n", calls.join("\n"));
    let Some(o) = python(&["-c", &program]) else { return };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    for ((b, c), line) in pairs.iter().zip(text.lines()) {
        let (got, want) = (line.parse::<f64>().unwrap(), stats::mcnemar_exact(*b, *c));
        assert!((got - want).abs() <= 1e-9, "McNemar {b} / {c}: python {got}, rust {want}");
    }
}

#[test]
fn the_committed_paper_readme_is_the_generators_output() {
    let Some(o) = python(&["scripts/paper_readme.py", "results/paper"]) else { return };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = std::fs::read_to_string(root.join("results/paper/README.md")).unwrap();
    let generated = String::from_utf8(o.stdout).unwrap();
    if generated != committed {
        let line = generated
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(generated.lines().count().min(committed.lines().count()));
        panic!(
            "results/paper/README.md differs from `python3 scripts/paper_readme.py results/paper` from line {}: regenerate it\n generated: {:?}\n committed: {:?}",
            line + 1,
            generated.lines().nth(line),
            committed.lines().nth(line)
        );
    }
}

/// The README's "which strategy when" table and hypothesis verdicts are the recovery study's,
/// as its report generated them (results/paper/recovery/report.md), line for line: no verdict
/// in the README is typed by hand.
#[test]
fn the_readmes_strategy_table_is_the_studys_report() {
    readme_has_the_study("recovery", "## Which strategy when", 6);
}

#[test]
fn the_readmes_permanent_loss_table_is_the_studys_report() {
    readme_has_the_study("permanent-loss", "## Which `recovery` option when", 6);
}

/// Every row of the generated table under `heading` in `results/paper/<study>/report.md`, and
/// each of its `hypotheses` verdict lines, appear verbatim in the README.
fn readme_has_the_study(study: &str, heading: &str, hypotheses: usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let report = std::fs::read_to_string(root.join(format!("results/paper/{study}/report.md"))).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = report.split(heading).nth(1).and_then(|s| s.split("\n## ").next()).expect("the report has the table");
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| ")).collect();
    assert!(rows.len() > 2, "{section}");
    let stated = report.split("## Hypotheses").nth(1).expect("the report states its hypotheses");
    let verdicts: Vec<&str> = stated.lines().filter(|l| l.starts_with("- **")).collect();
    assert_eq!(verdicts.len(), hypotheses, "{stated}");
    for row in rows.into_iter().chain(verdicts) {
        assert!(readme.lines().any(|l| l == row), "README.md lacks the {study} study's line {row:?}");
    }
}
