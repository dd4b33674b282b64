//! The campaign shortcuts (docs/campaigns.md, "Shortcuts"): a train run takes the steps before
//! its first fault, and the steps after its state is the golden run's again with no fault left,
//! from the golden run's step cache instead of training them, and its results are the same
//! bits. Runs one tiny train campaign through the real CLI with and without
//! `--no-shortcuts` (the four strategies, without faults, with one crash, and with random
//! crashes and weight flips; checkpoints pruned to the last two; the divergence detector on)
//! and checks that every column of `runs.csv` but the wall-clock ones and the shortcut's own is
//! equal, and per run `metrics.csv` (but its wall column), `compare.csv`, `faults.jsonl`,
//! `summary.json` (but its wall-clock fields) and the checkpoint names; and that the shortcut
//! took the whole run somewhere, part of one elsewhere, a restarted run's remainder somewhere,
//! and nothing with `--no-shortcuts`.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{csv_records, finished_campaign};

const CAMPAIGN: &str = r#"
[campaign]
kind = "train"
seeds = [3]
repetitions = 2
timeout_s = 300

[base]
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 8, classes = 4, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 16, batch_size = 32, eval_every = 4, log_every = 4 }
parallel = { workers = 4, bucket_mb = 0.004, compute = { gflops = 50.0 } }
checkpoint = { every_steps = 3, keep_last = 2 }
detect = { divergence_every = 2 }

[grid]
"recovery.strategy" = ["none", "checkpoint_restart", "rollback", "lossy_forward"]

[grid.fault]
"none" = []
"one crash" = [{ target = "crash", count = 1 }]
"mtbf 8" = [
    { target = "crash", system_mtbf_steps = 8 },
    { target = "weights", system_mtbf_steps = 8, injection_tries = 2, first_bit = 3, last_bit = 4, allow_sign_change = false },
]
"#;

/// `runs.csv` columns that differ between runs with and without the shortcut: wall clock, and
/// the shortcut's own record.
const VARYING: [&str; 5] = ["wall_s", "golden_wall_s", "time_overhead_frac", "shortcut_prefix_steps", "shortcut_remainder_steps"];

/// `summary.json` fields measured on the wall clock (or naming the directory or command).
const SUMMARY_VARYING: [&str; 11] = [
    "wall_s",
    "train_s",
    "images_per_s",
    "checkpoint_s",
    "time_overhead_vs_golden",
    "golden",
    "provenance",
    "restarts",
    "shortcut_off",
    "shortcut_prefix_steps",
    "shortcut_remainder_steps",
];

/// Runs the campaign, named `shortcuts` either way (its name is in every `summary.json`), into
/// `dir/name/shortcuts` with `extra` arguments; returns its directory.
fn campaign(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let dir = dir.join(name);
    std::fs::create_dir(&dir).unwrap();
    finished_campaign(&dir, "shortcuts", CAMPAIGN, extra)
}

/// `runs.csv` by run id.
fn runs(out: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    csv_records(&out.join("runs.csv")).into_iter().map(|r| (r["id"].clone(), r)).collect()
}

/// A run's file as text, `None` when it has none.
fn text(out: &Path, id: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(out.join("runs").join(id).join(file)).ok()
}

/// `metrics.csv` without its `wall_s` column.
fn metrics(out: &Path, id: &str) -> Vec<BTreeMap<String, String>> {
    let mut rows = csv_records(&out.join("runs").join(id).join("metrics.csv"));
    for r in &mut rows {
        r.remove("wall_s");
    }
    rows
}

/// `summary.json` without its wall-clock fields, and the restarts without their seconds.
fn summary(out: &Path, id: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(&text(out, id, "summary.json").unwrap()).unwrap();
    let restarts: Vec<(serde_json::Value, serde_json::Value)> =
        v["restarts"].as_array().unwrap().iter().map(|r| (r["at_step"].clone(), r["to_step"].clone())).collect();
    let o = v.as_object_mut().unwrap();
    for k in SUMMARY_VARYING {
        o.remove(k);
    }
    o.insert("restart_steps".into(), serde_json::json!(restarts));
    v
}

/// The run's checkpoint names (`step-*`).
fn checkpoints(out: &Path, id: &str) -> Vec<String> {
    let dir = out.join("runs").join(id).join("checkpoints");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("step-")).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn runs_with_and_without_the_shortcut_give_the_same_results() {
    let tmp = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let fast = campaign(tmp.path(), "fast", &[]);
    let fast_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let slow = campaign(tmp.path(), "slow", &["--no-shortcuts"]);
    let slow_s = t.elapsed().as_secs_f64();
    eprintln!("campaign with shortcuts {fast_s:.1} s, without {slow_s:.1} s");
    let (a, b) = (runs(&fast), runs(&slow));
    assert_eq!(a.len(), 24);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    let (mut prefixes, mut remainders) = (Vec::new(), Vec::new());
    for (id, ra) in &a {
        let rb = &b[id];
        assert_eq!(ra["status"], "ok", "{ra:?}");
        for (k, v) in ra {
            if !VARYING.contains(&k.as_str()) {
                assert_eq!(v, &rb[k], "run {id} ({}, {}): column {k}", ra["recovery.strategy"], ra["fault"]);
            }
        }
        assert_eq!(
            (rb["shortcut_prefix_steps"].as_str(), rb["shortcut_remainder_steps"].as_str()),
            ("0", "0"),
            "run {id} without shortcuts"
        );
        let (prefix, remainder) =
            (ra["shortcut_prefix_steps"].parse::<u64>().unwrap(), ra["shortcut_remainder_steps"].parse::<u64>().unwrap());
        prefixes.push(prefix);
        remainders.push((ra["recovery.strategy"].clone(), remainder));
        eprintln!("{} / {}: prefix {prefix}, remainder {remainder}", ra["recovery.strategy"], ra["fault"]);
        assert_eq!(metrics(&fast, id), metrics(&slow, id), "run {id}: metrics.csv");
        for file in ["compare.csv", "faults.jsonl"] {
            assert_eq!(text(&fast, id, file), text(&slow, id, file), "run {id}: {file}");
        }
        assert_eq!(summary(&fast, id), summary(&slow, id), "run {id}: summary.json");
        assert_eq!(checkpoints(&fast, id), checkpoints(&slow, id), "run {id}: checkpoints");
    }
    // Not vacuous: fault-free runs took every step, some faulty run part of its steps.
    assert!(prefixes.contains(&16), "{prefixes:?}");
    assert!(prefixes.iter().any(|&p| p > 0 && p < 16), "{prefixes:?}");
    // A restart replays the golden run's steps: some checkpoint-restart run took its remainder.
    // Lossy forward goes on from a state the golden run never had, and never can.
    assert!(remainders.iter().any(|(s, r)| s == "checkpoint_restart" && *r > 0), "{remainders:?}");
    assert!(remainders.iter().all(|(s, r)| s != "lossy_forward" || *r == 0), "{remainders:?}");
    let off: serde_json::Value = serde_json::from_str(&text(&slow, a.keys().next().unwrap(), "summary.json").unwrap()).unwrap();
    assert!(off["shortcut_off"].as_str().is_some_and(|s| s.contains("no-shortcuts")), "{off}");
}
