//! `resilab report --paper results/paper` writes results/paper/README.md from the presets'
//! reports. These tests hold the committed README to that (no verdict edited by hand), check
//! some of its rows against the reports' own files (a claim's verdict against the
//! comparisons.csv rows it counts; the N-EV factor study's pooled tests recomputed from
//! runs.csv with `resilab_report::stats`), and check that the top-level README's study tables
//! are the studies' reports.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::Path;
use std::process::Command;

use resilab_report::stats;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn committed_readme() -> String {
    std::fs::read_to_string(root().join("results/paper/README.md")).unwrap()
}

/// Copies the directory `from` into `to`, all but a `README.md` at its top.
fn copy_reports(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_reports(&src, &dst);
        } else if !(from.ends_with("results/paper") && e.file_name() == "README.md") {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

#[test]
fn the_committed_paper_readme_is_what_resilab_generates() {
    // On a copy of the reports, so that the committed file is compared, never rewritten.
    let scratch = tempfile::tempdir().unwrap();
    let paper = scratch.path().join("results/paper");
    copy_reports(&root().join("results/paper"), &paper);
    let o = Command::new(env!("CARGO_BIN_EXE_resilab")).args(["report", "--paper"]).arg(&paper).output().unwrap();
    assert!(o.status.success(), "resilab report --paper failed: {}", String::from_utf8_lossy(&o.stderr));
    let generated = std::fs::read_to_string(paper.join("README.md")).unwrap();
    let committed = committed_readme();
    if generated != committed {
        let (g, c): (Vec<&str>, Vec<&str>) = (generated.lines().collect(), committed.lines().collect());
        let line = g.iter().zip(&c).position(|(a, b)| a != b).unwrap_or(g.len().min(c.len()));
        panic!(
            "results/paper/README.md differs from what `resilab report --paper results/paper` generates, from line {} on \
             (regenerate it with that command):\n generated: {:?}\n committed: {:?}",
            line + 1,
            g.get(line),
            c.get(line)
        );
    }
}

#[test]
fn report_help_explains_the_paper_flag() {
    let o = Command::new(env!("CARGO_BIN_EXE_resilab")).args(["report", "--help"]).output().unwrap();
    let help = String::from_utf8(o.stdout).unwrap();
    assert!(help.contains("--paper") && help.contains("README.md"), "{help}");
}

/// The README's section of `folder` (from its heading to the next).
fn section<'a>(readme: &'a str, folder: &str) -> &'a str {
    let start = readme.find(&format!("\n## {folder}: ")).unwrap_or_else(|| panic!("no section for {folder}"));
    let rest = &readme[start + 1..];
    rest[3..].find("\n## ").map_or(rest, |end| &rest[..end + 3])
}

#[derive(serde::Deserialize)]
struct Comparison {
    axis: String,
    a: String,
    b: String,
    metric: String,
    diff: f64,
    verdict: String,
}

/// Each claim's verdict line says how many of the comparisons.csv rows of its axis, options
/// and metric are shown each way, and lists every one of them.
#[test]
fn a_claims_verdict_counts_the_comparisons_it_rests_on() {
    // (folder, claim, axis, a, b, metric, expected sign of b - a, the committed verdict)
    let claims = [
        ("nev", "N-EV grows from 10 to 100 flips", "inject.injection_tries", "10", "100", "nev_pct", 1.0, "shown (3 of 3)"),
        (
            "dp-one-flip",
            "an optimizer-state flip leaves the replicas diverged more often than a model flip",
            "inject.locations_to_corrupt",
            "model",
            "optimizer",
            "diverged_pct",
            1.0,
            "partly (2 of 4)",
        ),
        (
            "dp-many-flips",
            "model flips cost more accuracy than optimizer-state flips",
            "inject.locations_to_corrupt",
            "model",
            "optimizer",
            "acc_loss_all_pts",
            -1.0,
            "contradicted (1 of 18)",
        ),
        ("precision", "32-bit flips give more N-EV than 16-bit ones", "inject", "f16", "f32", "nev_pct", 1.0, "not shown (0 of 12)"),
    ];
    let readme = committed_readme();
    for (folder, claim, axis, a, b, metric, sign, committed) in claims {
        let path = root().join("results/paper").join(folder).join("comparisons.csv");
        let rows: Vec<Comparison> = csv::Reader::from_path(&path)
            .unwrap()
            .deserialize()
            .map(Result::unwrap)
            .filter(|c: &Comparison| c.axis == axis && c.a == a && c.b == b && c.metric == metric)
            .collect();
        let shown = |s: f64| rows.iter().filter(|c| c.verdict == "shown" && c.diff * sign * s > 0.0).count();
        let (with, against, n) = (shown(1.0), shown(-1.0), rows.len());
        let want = if against > 0 {
            format!("contradicted ({against} of {n})")
        } else if with == n {
            format!("shown ({n} of {n})")
        } else if with > 0 {
            format!("partly ({with} of {n})")
        } else {
            format!("not shown (0 of {n})")
        };
        assert_eq!(want, committed, "{folder}: {claim}");
        let text = section(&readme, folder);
        let head = format!("- **{claim}**: {want}.");
        let at = text.lines().position(|l| l == head).unwrap_or_else(|| panic!("{folder}: no line {head:?}"));
        let listed = text.lines().skip(at + 1).take_while(|l| l.starts_with("  - ")).count();
        assert_eq!(listed, n, "{folder}: {claim} lists {listed} comparisons, comparisons.csv has {n}");
    }
}

/// The pooled N-EV factor table: each level's N-EV and Wilson interval, the difference with
/// Newcombe's interval, Holm's p over the table and the verdict, recomputed from
/// nev-factors/runs.csv (runs with status ok whose step counter no flip altered).
#[test]
fn the_pooled_factor_rows_are_the_runs_recomputed() {
    let mut reader = csv::Reader::from_path(root().join("results/paper/nev-factors/runs.csv")).unwrap();
    let header = reader.headers().unwrap().clone();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap_or_else(|| panic!("runs.csv has no {name}"));
    let runs: Vec<csv::StringRecord> = reader
        .records()
        .map(Result::unwrap)
        .filter(|r| &r[col("status")] == "ok" && r[col("base_step")] == r[col("restart_step")])
        .collect();
    // The table's factors, in its order: (label, [(column, level a, level b)]).
    type Level = (&'static str, &'static str, &'static str);
    let factors: [(&str, &[Level]); 4] = [
        ("precision", &[("inject", "32-bit word", "64-bit view")]),
        ("allow_NaN_values", &[("inject.allow_NaN_values", "true", "false")]),
        ("datasets drawn over the whole file", &[("inject.use_random_locations", "false", "true")]),
        (
            "precision and allow_NaN_values together",
            &[("inject", "32-bit word", "64-bit view"), ("inject.allow_NaN_values", "true", "false")],
        ),
    ];
    // (flips, label, level names, pooled (k, n, seeds) of a and b)
    let mut expected = Vec::new();
    for flips in ["10", "100"] {
        for (label, levels) in factors {
            let pool = |pick: fn(&Level) -> &'static str| {
                let sel: Vec<&csv::StringRecord> = runs
                    .iter()
                    .filter(|r| &r[col("inject.injection_tries")] == flips && levels.iter().all(|l| &r[col(l.0)] == pick(l)))
                    .collect();
                let seeds: std::collections::BTreeSet<&str> = sel.iter().map(|r| &r[col("seed")]).collect();
                (sel.iter().filter(|r| &r[col("nev")] == "true").count() as u64, sel.len() as u64, seeds.len())
            };
            let names = |pick: fn(&Level) -> &'static str| levels.iter().map(pick).collect::<Vec<_>>().join(" + ");
            expected.push((flips, label, [names(|l| l.1), names(|l| l.2)], [pool(|l| l.1), pool(|l| l.2)]));
        }
    }
    let tests: Vec<stats::Test> = expected.iter().map(|(.., [a, b])| stats::two_proportions(a.0, a.1, b.0, b.1).unwrap()).collect();
    let holm = stats::holm(&tests.iter().map(|t| t.p).collect::<Vec<_>>());
    let readme = committed_readme();
    let pooled = readme.split("\n## nev-factors: each factor's effect on N-EV, pooled\n").nth(1).unwrap();
    let pooled = pooled.split("\n## ").next().unwrap();
    let rows: Vec<Vec<&str>> =
        pooled.lines().filter(|l| l.starts_with("| 10 |") || l.starts_with("| 100 |")).map(|l| l.split(" | ").collect()).collect();
    assert_eq!(rows.len(), expected.len(), "{pooled}");
    for (((flips, label, names, pools), (t, p_holm)), row) in expected.iter().zip(tests.iter().zip(holm)).zip(&rows) {
        let what = format!("{flips} flips, {label}");
        assert_eq!((row[0], row[1]), (format!("| {flips}").as_str(), *label), "{what}");
        for (cell, name, (k, n, _)) in [(row[2], &names[0], pools[0]), (row[3], &names[1], pools[1])] {
            let (lo, hi) = stats::wilson(k, n).unwrap();
            let pct = 100.0 * k as f64 / n as f64;
            assert_eq!(cell, format!("{name}: {pct:.1} [{:.1}, {:.1}] (n = {n})", 100.0 * lo, 100.0 * hi), "{what}");
        }
        assert_eq!(row[4], format!("{:+.1} [{:+.1}, {:+.1}]", 100.0 * t.diff, 100.0 * t.ci.0, 100.0 * t.ci.1), "{what}");
        // Written to 2 significant digits.
        let written: f64 = row[5].parse().unwrap();
        assert!((written - p_holm).abs() <= 0.05 * p_holm, "{what}: p Holm {written} written, {p_holm} recomputed");
        let shown = p_holm < stats::ALPHA && pools[0].2.min(pools[1].2) >= resilab_report::MIN_SEEDS;
        assert_eq!(row[6], if shown { "shown" } else { "not shown" }, "{what}");
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
    readme_has_the_study("permanent-loss", "## Which recovery option when", 6);
}

/// The README's detector table is the detectors study's choice table, as its report generated it
/// (results/paper/detectors/report.md), line for line.
#[test]
fn the_readmes_detector_table_is_the_studys_report() {
    let report = std::fs::read_to_string(root().join("results/paper/detectors/report.md")).unwrap();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = report.split("## Detectors, scored from recorded signals").nth(1).expect("the report scores its detectors");
    let table = section.split("| detector | verdict").nth(1).and_then(|s| s.split("\n\n").next()).expect("the choice table");
    let rows: Vec<&str> = table.lines().skip(2).filter(|l| l.starts_with("| ")).collect();
    assert_eq!(rows.len(), 5, "{table}");
    for row in rows {
        assert!(readme.lines().any(|l| l == row), "README.md lacks the detectors study's line {row:?}");
    }
}

/// The recovery study's choices priced at its two real jobs, side by side with its own, as its
/// report generated them; and the same at the other cost profile (`resilab report
/// results/paper/recovery --price megascale-unoptimised --out results/paper/recovery/unoptimised`):
/// the README's two job tables are those reports', line for line.
#[test]
fn the_readmes_job_tables_are_the_reports() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for (dir, profile) in
        [("results/paper/recovery", "megascale-optimised"), ("results/paper/recovery/unoptimised", "megascale-unoptimised")]
    {
        let report = std::fs::read_to_string(root().join(dir).join("report.md")).unwrap();
        let section = report.split("## Priced at real jobs").nth(1).expect("the report prices its jobs");
        assert!(section.contains(&format!("the cost profile `{profile}`")), "{section}");
        let side = section.split("side by side").nth(1).and_then(|s| s.split("\n### ").next()).expect("the table side by side");
        let rows: Vec<&str> = side.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 1 + 9, "{side}");
        for row in rows {
            assert!(readme.lines().any(|l| l == row), "README.md lacks {dir}'s line {row:?}");
        }
    }
}

/// Every row of the generated table under `heading` in `results/paper/<study>/report.md`, and
/// each of its `hypotheses` verdict lines, appear verbatim in the README.
fn readme_has_the_study(study: &str, heading: &str, hypotheses: usize) {
    let report = std::fs::read_to_string(root().join(format!("results/paper/{study}/report.md"))).unwrap();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = report.split(heading).nth(1).and_then(|s| s.split("\n## ").next()).expect("the report has the table");
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| ")).collect();
    assert!(rows.len() > 2, "{section}");
    let stated = report.split("## Hypotheses").nth(1).expect("the report states its hypotheses");
    let verdicts: Vec<&str> = stated.lines().filter(|l| l.starts_with("- **")).collect();
    assert_eq!(verdicts.len(), hypotheses, "{stated}");
    for row in rows.into_iter().chain(verdicts) {
        assert!(readme.lines().any(|l| l == row), "README.md lacks the {study} study's line {row:?}");
    }
    // What the study rests on, as the paper README generates it beside the same table.
    let paper = committed_readme();
    let part = paper.split(&format!("\n## {study}: ")).nth(1).expect("the paper README has the study");
    let rests = part.lines().find(|l| l.starts_with("**What this rests on.**")).expect("the study says what it rests on");
    assert!(readme.lines().any(|l| l == rests), "README.md lacks the {study} study's {rests:?}");
}
