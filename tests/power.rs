//! A committed study is a campaign one can read: `report`, `report --power` and
//! `campaign --status` on a copy of `results/paper/recovery` (campaign.toml, campaign.json and
//! runs.csv, no runs.jsonl) answer as on the campaign that wrote it, `--power 0.5` in seconds
//! with the admissibility rule and a unit on every figure; and a report read from `runs.csv`
//! alone is the one read from `runs.jsonl`, file for file.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{NEV, csv_records, finished_campaign, resilab, run};

/// Copies the directory `from` into `to`, all but `skip` at its top.
fn copy_dir(from: &Path, to: &Path, skip: &[&str]) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if skip.iter().any(|s| e.file_name() == *s) {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()), &[]);
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Runs `resilab args`, killed after `limit`; its output and how long it took.
fn run_within(args: &[&str], limit: Duration) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let mut child = resilab().args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("resilab {} ran past {limit:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), started.elapsed())
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The committed recovery study, copied to a fresh directory.
fn committed_recovery(tmp: &Path) -> PathBuf {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper/recovery");
    assert!(!committed.join("runs.jsonl").exists(), "the committed form has runs.csv only");
    let copy = tmp.join("recovery");
    copy_dir(&committed, &copy, &[]);
    copy
}

#[test]
fn power_answers_at_half_a_point_on_the_committed_recovery_study_in_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let copy = committed_recovery(tmp.path());
    for d in ["0.5", "0.7"] {
        let (o, took) = run_within(&["report", s(&copy), "--power", d], Duration::from_secs(10));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(took < Duration::from_secs(10), "{took:?}");
        // 54 tests, each with what it detects now and what it needs, both with their units.
        let tests: Vec<&str> = text.lines().filter(|l| l.contains("] | ")).collect();
        assert_eq!(tests.len(), 54, "{text}");
        for l in &tests {
            let unit = ["% of golden time", "accuracy points", "% of runs"]
                .into_iter()
                .find(|u| l.contains(&format!(" {u} | ")))
                .unwrap_or_else(|| panic!("no unit: {l}"));
            assert!(l.ends_with(&format!(" groups ({d} {unit}) |")), "{l}");
        }
        // The admissibility rule: each option a condition does not choose, with the groups its
        // upper bound needs, or why none do.
        let (_, adm) = text.split_once("\nAdmissibility (").unwrap_or_else(|| panic!("{text}"));
        assert!(adm.contains("| groups for upper bound < 0.5 accuracy points and rate bound < 10% |"), "{adm}");
        let lines: Vec<&str> = adm.lines().filter(|l| l.starts_with("| fault=")).collect();
        assert!(!lines.is_empty(), "{adm}");
        for l in &lines {
            let needed = l.rsplit('|').nth(1).unwrap().trim();
            assert!(
                needed.contains(" groups (mean rule: ")
                    || needed == "admissible now"
                    || needed.starts_with("not reachable (")
                    || needed.starts_with("n/a: "),
                "{l}"
            );
        }
        // none fails at its crashes: a catastrophe rate no number of groups brings under 10%.
        assert!(
            lines.iter().any(|l| l.contains("| none | fewer than 2 accuracy losses; catastrophes 30/30: rate bound 100.0% >= 10% |")),
            "{adm}"
        );
        assert!(
            lines.iter().any(|l| l.contains("not reachable (mean rule: fewer than 2 accuracy losses; rate rule: not reachable")),
            "{adm}"
        );
        assert!(lines.iter().any(|l| l.contains("not reachable (mean rule: not reachable (mean ")), "{adm}");
    }
    let o = run(&["campaign", "--status", s(&copy)]);
    let status = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        status.contains("1080 of 1080 recorded (1080 ok), complete")
            && status.contains("all: 1080 of 1080 runs recorded (0 not ok), 0 missing"),
        "{status}"
    );
}

#[test]
fn a_report_of_the_committed_study_reaches_its_committed_verdicts() {
    let tmp = tempfile::tempdir().unwrap();
    let copy = committed_recovery(tmp.path());
    let o = run(&["report", s(&copy)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("1080 runs in 36 cells"), "{}", String::from_utf8_lossy(&o.stdout));
    // Into <dir>/report: the committed files are untouched.
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper/recovery");
    for f in ["report.md", "cells.csv", "runs.csv", "which_strategy.csv"] {
        assert_eq!(std::fs::read(copy.join(f)).unwrap(), std::fs::read(committed.join(f)).unwrap(), "{f}");
    }
    // The same choices and verdicts, from runs.csv alone.
    let pick = |p: &Path, cols: &[&str]| -> Vec<Vec<String>> {
        csv_records(p).iter().map(|r| cols.iter().map(|c| r[*c].clone()).collect()).collect()
    };
    let choice = ["condition", "choice", "decided", "groups_needed"];
    assert_eq!(pick(&copy.join("report/which_strategy.csv"), &choice), pick(&committed.join("which_strategy.csv"), &choice));
    let verdict = ["hypothesis", "condition", "n_pairs", "verdict"];
    assert_eq!(pick(&copy.join("report/comparisons.csv"), &verdict), pick(&committed.join("comparisons.csv"), &verdict));
    // The priced tables too, at the runs' profile and re-priced at the other one.
    let unoptimised = copy.join("unoptimised-again");
    let o = run(&["report", s(&copy), "--price", "megascale-unoptimised", "--out", s(&unoptimised)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (made, kept) in [(copy.join("report"), committed.clone()), (unoptimised, committed.join("unoptimised"))] {
        for f in ["which_strategy.csv", "which_strategy_jobs.csv"] {
            assert_eq!(std::fs::read(made.join(f)).unwrap(), std::fs::read(kept.join(f)).unwrap(), "{} {f}", kept.display());
        }
    }
    let md = std::fs::read_to_string(copy.join("report/report.md")).unwrap();
    assert!(md.contains("1080 runs recorded of 1080"), "{md}");
    assert!(md.contains("smallest paired difference detectable at 80% power: 0.02 to 0.26 accuracy points."), "{md}");
    assert!(md.contains("no `runs/`"), "the missing accuracy curves are said: {md}");
}

/// Every file under `dir`, by its path inside it, with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// A tiny paired study of the four strategies: 3 groups.
const STUDY: &str = r#"
[campaign]
kind = "train"
seeds = [3]
repetitions = 3
timeout_s = 300

[[campaign.hypothesis]]
name = "lossy forward costs less simulated time than rollback"
metric = "sim_overhead"
a = "rollback"
b = "lossy_forward"

[base]
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 8, classes = 4, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 12, batch_size = 32, eval_every = 6 }
parallel = { workers = 4, compute = { gflops = 50.0 } }
checkpoint = { every_steps = 4 }

[[base.fault]]
target = "crash"
system_mtbf_steps = 5

[grid]
"recovery.strategy" = ["none", "checkpoint_restart", "rollback", "lossy_forward"]
"#;

/// The campaign `dir` and a copy of it without `runs.jsonl` report the same, file for file;
/// `--power` and `--status` print the same.
fn same_from_csv(tmp: &Path, dir: &Path) {
    let copy = tmp.join(format!("{}-csv", dir.file_name().unwrap().to_string_lossy()));
    copy_dir(dir, &copy, &["runs.jsonl", "report"]);
    for d in [dir, copy.as_path()] {
        let o = run(&["report", s(d)]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let (a, b) = (files(&dir.join("report")), files(&copy.join("report")));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        assert!(bytes == &b[name], "{} differs from runs.csv's", name.display());
    }
    for args in [vec!["report", "--power", "0.5"], vec!["campaign", "--status"]] {
        let out = |d: &Path| {
            let o = run(&[args.as_slice(), &[s(d)]].concat());
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).replace(s(d), "DIR")
        };
        assert_eq!(out(dir), out(&copy), "{args:?}");
    }
}

#[test]
fn a_report_from_runs_csv_alone_equals_the_one_from_runs_jsonl() {
    let tmp = tempfile::tempdir().unwrap();
    // A study (train runs, hypotheses, paired) and a campaign of restart runs with flips.
    let study = finished_campaign(tmp.path(), "study", STUDY, &[]);
    same_from_csv(tmp.path(), &study);
    // --resume in the committed form continues it: runs.csv's rows become the record, nothing
    // is run again and runs.csv is kept (it was once emptied to its header, every run redone).
    let copy = tmp.path().join("study-csv");
    let runs_csv = std::fs::read(copy.join("runs.csv")).unwrap();
    let cfg = copy.join("campaign.toml");
    let o = run(&["campaign", "--config", s(&cfg), "--out", s(&copy), "--resume", "--jobs", "1", "--threads", "1", "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(copy.join("runs.csv")).unwrap(), runs_csv);
    // runs.csv cannot tell an empty text from none (steps_at_workers of a run that stopped at
    // its first step): the rebuilt record has none.
    let blank = |t: BTreeMap<String, String>| t.into_iter().map(|(k, v)| (k, v.replace(":\"\",", ":null,"))).collect::<BTreeMap<_, _>>();
    assert_eq!(blank(common::table(&copy)), blank(common::table(&study)), "runs.jsonl rebuilt from runs.csv");
    let nev = finished_campaign(tmp.path(), "nev", NEV, &[]);
    same_from_csv(tmp.path(), &nev);
}
