//! `resilab report DIR --set recovery.relaunch_s=V`: a campaign's runs re-priced from the events
//! each paid for equal the same campaign rerun at the new constants.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{assert_clean_error, csv_records, finished_campaign, run};

/// Two workers, crashes of worker 1 at steps 3 and 6 under three strategies; the recovery
/// constants scaled to the tiny run's millisecond steps: `PRICES`.
const CAMPAIGN: &str = r#"
[campaign]
kind = "train"
seeds = [3]
repetitions = 1
timeout_s = 300

[base]
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 8, classes = 4, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 8, batch_size = 32, eval_every = 4 }
parallel = { workers = 2, bucket_mb = 0.004, compute = { gflops = 20.0 } }
checkpoint = { every_steps = 2 }
recovery = { PRICES }

[[base.fault]]
target = "crash"
at_step = 3
worker = 1
at_fraction = 0.5

[[base.fault]]
target = "crash"
at_step = 6
worker = 1
at_fraction = 0.5

[grid]
"recovery.strategy" = ["checkpoint_restart", "rollback", "lossy_forward"]
"#;

/// The constants the campaign runs at first, and those it is re-priced and rerun at.
const RECORDED: &str = "detect_timeout_s = 0.2, rebuild_s = 0.1, relaunch_s = 0.5";
const NEW: &str = "detect_timeout_s = 0.7, rebuild_s = 0.3, relaunch_s = 2.0";
const SET: [&str; 6] = ["--set", "recovery.relaunch_s=2.0", "--set", "recovery.rebuild_s=0.3", "--set", "recovery.detect_timeout_s=0.7"];

fn report(dir: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["report", dir.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    run(&args)
}

/// Per run id (or cell), the float in `column` of each row of `file`.
fn floats(file: &Path, key: &str, column: &str) -> BTreeMap<String, f64> {
    csv_records(file).into_iter().map(|r| (r[key].clone(), r[column].parse::<f64>().unwrap_or(f64::NAN))).collect()
}

fn assert_close(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>, what: &str) {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "{what}");
    for (k, x) in a {
        let y = b[k];
        assert!((x - y).abs() <= 1e-9 * y.abs().max(1e-12), "{what} of {k}: re-priced {x}, rerun {y}");
    }
}

#[test]
fn runs_repriced_from_their_events_equal_the_runs_rerun_at_the_new_constants() {
    let tmp = tempfile::tempdir().unwrap();
    let at_a = finished_campaign(tmp.path(), "a", &CAMPAIGN.replace("PRICES", RECORDED), &[]);
    let at_b = finished_campaign(tmp.path(), "b", &CAMPAIGN.replace("PRICES", NEW), &[]);
    let runs_a = csv_records(&at_a.join("runs.csv"));
    let runs_b = csv_records(&at_b.join("runs.csv"));
    // The same events either way: the constants decide none of them.
    for column in ["digest", "detect_charges", "rebuilds", "relaunches", "in_place_reloads"] {
        let of = |runs: &[BTreeMap<String, String>]| runs.iter().map(|r| (r["id"].clone(), r[column].clone())).collect::<BTreeMap<_, _>>();
        assert_eq!(of(&runs_a), of(&runs_b), "{column}");
    }
    let count = |column: &str| runs_a.iter().map(|r| r[column].parse::<u64>().unwrap()).sum::<u64>();
    assert!(count("detect_charges") > 0 && count("rebuilds") > 0 && count("relaunches") > 0, "every constant is paid: {runs_a:?}");

    let priced = tmp.path().join("priced");
    let o = report(&at_a, &priced, &SET);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rerun = tmp.path().join("rerun");
    assert!(report(&at_b, &rerun, &[]).status.success());
    let rerun_sim = floats(&at_b.join("runs.csv"), "id", "sim_s");
    assert_close(&floats(&priced.join("priced.csv"), "id", "sim_s"), &rerun_sim, "simulated seconds");
    assert_close(
        &floats(&priced.join("priced.csv"), "id", "sim_overhead_frac"),
        &floats(&at_b.join("runs.csv"), "id", "sim_overhead_frac"),
        "overhead",
    );
    assert_ne!(floats(&priced.join("priced.csv"), "id", "recorded_sim_s"), rerun_sim, "the prices changed the time");
    let cell = "recovery.strategy";
    assert_close(
        &floats(&priced.join("cells.csv"), cell, "sim_overhead_pct"),
        &floats(&rerun.join("cells.csv"), cell, "sim_overhead_pct"),
        "cells",
    );
    let md = std::fs::read_to_string(priced.join("report.md")).unwrap();
    assert!(md.contains("## Re-priced") && md.contains("| 0.2 | 0.1 | 0.5 | no | 0.7 | 0.3 | 2 | no |"), "{md}");
}

/// `break_even.csv`: the rebuild at which checkpoint-restart and lossy forward cost the same,
/// read from the runs' events; re-pricing the runs at it gives the two options the same mean
/// overhead, and rollback and lossy forward, which rebuild alike, have none.
#[test]
fn the_break_even_a_report_reads_from_the_runs_equalises_their_repriced_overheads() {
    let tmp = tempfile::tempdir().unwrap();
    // A study (its hypothesis names the compared axis), two runs an option (a cell's mean
    // overhead needs two).
    let hypothesis = "timeout_s = 300\n\n[[campaign.hypothesis]]\nname = \"lossy forward costs less\"\nmetric = \"sim_overhead\"\na = \"checkpoint_restart\"\nb = \"lossy_forward\"\n";
    let dir = finished_campaign(
        tmp.path(),
        "a",
        &CAMPAIGN.replace("PRICES", RECORDED).replace("timeout_s = 300\n", hypothesis).replace("repetitions = 1", "repetitions = 2"),
        &[],
    );
    let plain = tmp.path().join("plain");
    assert!(report(&dir, &plain, &[]).status.success());
    let rows = csv_records(&plain.join("break_even.csv"));
    let find = |a: &str, b: &str| rows.iter().find(|r| r["key"] == "recovery.rebuild_s" && r["a"] == a && r["b"] == b).unwrap();
    assert_eq!(find("rollback", "lossy_forward")["break_even_s"], "", "{rows:?}");
    let even = find("checkpoint_restart", "lossy_forward");
    let x: f64 = even["break_even_s"].parse().unwrap();
    assert!(x > 0.1 && even["priced_s"] == "0.1", "{even:?}");
    assert_eq!((even["cheaper_below"].as_str(), even["cheaper_above"].as_str()), ("lossy_forward", "checkpoint_restart"));
    let at = tmp.path().join("at");
    let o = report(&dir, &at, &["--set", &format!("recovery.rebuild_s={x}")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cells = floats(&at.join("cells_study.csv"), "option", "sim_overhead_pct");
    let (cr, lf) = (cells["checkpoint_restart"], cells["lossy_forward"]);
    assert!(
        (cr - lf).abs() <= 1e-9 * cr.abs(),
        "at the break-even {x} s: checkpoint-restart {cr}%, lossy forward {lf}%: {}",
        std::fs::read_to_string(at.join("cells_study.csv")).unwrap()
    );
    assert!(std::fs::read_to_string(plain.join("report.md")).unwrap().contains("`break_even.csv` gives"));
}

/// A cost profile whose relaunch covers the checkpoint read and the steps recomputed after it
/// (`--price megascale-unoptimised`): the runs recorded at separate constants, re-priced at the
/// profile, equal the runs rerun with `recovery.profile` set, whose relaunches charge no redo.
#[test]
fn runs_repriced_at_a_profile_equal_the_runs_rerun_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let at_a = finished_campaign(tmp.path(), "a", &CAMPAIGN.replace("PRICES", RECORDED), &[]);
    let profile = r#"profile = "megascale-unoptimised", profile_scale = 0.001"#;
    let at_p = finished_campaign(tmp.path(), "p", &CAMPAIGN.replace("PRICES", profile), &[]);
    let (runs_a, runs_p) = (csv_records(&at_a.join("runs.csv")), csv_records(&at_p.join("runs.csv")));
    let of = |runs: &[BTreeMap<String, String>], column: &str| {
        runs.iter().map(|r| (r["id"].clone(), r[column].clone())).collect::<BTreeMap<_, _>>()
    };
    assert_eq!(of(&runs_a, "digest"), of(&runs_p, "digest"), "the same events");
    assert_eq!(of(&runs_a, "relaunch_redo_s"), of(&runs_p, "relaunch_redo_s"), "the same redo, charged or covered");
    let redo: f64 = runs_a.iter().map(|r| r["relaunch_redo_s"].parse::<f64>().unwrap()).sum();
    assert!(redo > 0.0, "checkpoint-restart recomputes steps after its relaunches: {runs_a:?}");

    let priced = tmp.path().join("priced");
    let o = report(&at_a, &priced, &["--price", "megascale-unoptimised", "--price-scale", "0.001"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_close(&floats(&priced.join("priced.csv"), "id", "sim_s"), &floats(&at_p.join("runs.csv"), "id", "sim_s"), "simulated seconds");
    let md = std::fs::read_to_string(priced.join("report.md")).unwrap();
    assert!(
        md.contains("cost profile `megascale-unoptimised`") && md.contains("| 0.2 | 0.1 | 0.5 | no | 0.6 | 1.047 | 1.917 | yes |"),
        "{md}"
    );
    // Back from the profile to separate constants: the redo is charged again.
    let back = tmp.path().join("back");
    let o = report(
        &at_p,
        &back,
        &["--set", "recovery.detect_timeout_s=0.2", "--set", "recovery.rebuild_s=0.1", "--set", "recovery.relaunch_s=0.5"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let still_covered = floats(&back.join("priced.csv"), "id", "sim_s");
    let recorded = floats(&at_a.join("runs.csv"), "id", "sim_s");
    assert!(still_covered.iter().any(|(k, v)| (v - recorded[k]).abs() > 1e-9), "--set keeps the profile's covering: {still_covered:?}");
    assert_clean_error(&report(&at_a, &back, &["--price", "megascale-unoptimised"]), &["--price-scale"]);
}

#[test]
fn repricing_refuses_other_keys_and_runs_recorded_without_the_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = finished_campaign(
        tmp.path(),
        "a",
        &CAMPAIGN.replace("PRICES", RECORDED).replace("\"rollback\", \"lossy_forward\"", "\"rollback\""),
        &[],
    );
    let out = tmp.path().join("out");
    assert_clean_error(
        &report(&dir, &out, &["--set", "checkpoint.every_steps=4"]),
        &["--set checkpoint.every_steps", "recovery.relaunch_s"],
    );
    assert_clean_error(
        &report(&dir, &out, &["--set", "recovery.relaunch_s=0.05"]),
        &["recovery.relaunch_s = 0.05 s would be below recovery.rebuild_s = 0.1 s"],
    );
    // Runs recorded before the counts: re-priced where their constant stays, refused where it changes.
    let jsonl = dir.join("runs.jsonl");
    let old: String = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("rebuilds");
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&jsonl, old).unwrap();
    assert!(report(&dir, &out, &["--set", "recovery.relaunch_s=2"]).status.success());
    assert_clean_error(&report(&dir, &out, &["--set", "recovery.rebuild_s=0.3"]), &["its record has no `rebuilds`"]);
}
