//! The two committed recovery studies (`results/paper/recovery`, `results/paper/permanent-loss`)
//! checked from their files alone: runs that can show an accuracy effect (every golden run at
//! 80% or more on at least 2,000 test images), paired strategies, choices that pass their own
//! rule, and (recovery) rollback and lossy forward apart only where their definitions differ: a
//! crash that met a completed all-reduce bucket (lossy forward keeps it, rollback redoes the
//! step), or damage found in the step it struck (rollback undoes the step, lossy forward
//! re-syncs the damaged replica from a healthy one).

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::csv_records as read;

const STUDIES: [&str; 2] = ["recovery", "permanent-loss"];

fn dir(study: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper").join(study)
}

fn campaign(study: &str) -> toml::Table {
    std::fs::read_to_string(dir(study).join("campaign.toml")).unwrap().parse().unwrap()
}

#[test]
fn every_golden_run_reaches_80_percent_on_at_least_2000_test_images() {
    for study in STUDIES {
        let c = campaign(study);
        let test_size = c["base"]["data"]["test_size"].as_integer().unwrap();
        assert!(test_size >= 2000, "{study}: {test_size} test images");
        let runs = read(&dir(study).join("runs.csv"));
        let mut golden: BTreeMap<String, f64> = BTreeMap::new();
        for r in &runs {
            golden.insert(r["golden_key"].clone(), r["golden_acc_frac"].parse().unwrap());
        }
        assert!(golden.len() >= 6, "{study}: {} golden runs", golden.len());
        for (key, acc) in &golden {
            assert!(*acc >= 0.8, "{study}: golden run {key} ends at {acc}");
        }
    }
}

#[test]
fn both_studies_are_paired_and_every_choice_passes_its_rule() {
    for study in STUDIES {
        let c = campaign(study);
        let budget = c["campaign"]["accuracy_budget_points"].as_float().unwrap();
        let paired = c["campaign"]["paired"].as_array().unwrap();
        let axis = c["campaign"]["hypothesis"][0].get("axis").and_then(|a| a.as_str()).unwrap_or("recovery.strategy");
        assert!(paired.iter().any(|p| p.as_str() == Some(axis)), "{study}: {axis} is not paired");
        for ch in read(&dir(study).join("which_strategy.csv")) {
            let decided = ch["decided"] == "true";
            if decided {
                let upper: f64 = ch["acc_loss_upper_pts"].parse().unwrap();
                assert!(upper < budget, "{study}: {} chose {} with an upper bound of {upper} points", ch["condition"], ch["choice"]);
            } else {
                assert!(!ch["groups_needed"].is_empty(), "{study}: {} is undecided without the groups it needs", ch["condition"]);
            }
        }
    }
}

#[test]
fn rollback_and_lossy_forward_differ_only_where_their_definitions_do() {
    let runs = read(&dir("recovery").join("runs.csv"));
    // Under the seeded order a step's sums are drawn again for every new reduction: rollback's
    // redo and lossy forward's re-reduction over the survivors each round anew, so any crash the
    // job went on after sets them apart.
    let seeded = campaign("recovery")["base"]["train"].get("reduction_order").and_then(|o| o.as_str()) == Some("seeded");
    // A group: every coordinate but the strategy (a study without a rebuild axis has none), the
    // training seed and the fault draw.
    let group = |r: &BTreeMap<String, String>| {
        ["parallel.workers", "recovery.rebuild_s", "fault", "seed", "rep"]
            .iter()
            .filter_map(|c| r.get(*c).cloned())
            .collect::<Vec<String>>()
    };
    let mut by: BTreeMap<Vec<String>, BTreeMap<String, &BTreeMap<String, String>>> = BTreeMap::new();
    for r in &runs {
        by.entry(group(r)).or_default().insert(r["recovery.strategy"].clone(), r);
    }
    let count = |r: &BTreeMap<String, String>, k: &str| r[k].parse::<u64>().unwrap();
    let (mut after_bucket, mut undone, mut alike, mut redrawn) = (0, 0, 0, 0);
    for (key, g) in &by {
        let (rb, lf) = (g["rollback"], g["lossy_forward"]);
        if rb["failed"] == "true" || lf["failed"] == "true" {
            continue;
        }
        assert_eq!(
            (rb["crashes"].as_str(), rb["first_crash_step"].as_str()),
            (lf["crashes"].as_str(), lf["first_crash_step"].as_str()),
            "{key:?}: not paired"
        );
        if rb["digest"] == lf["digest"] {
            alike += 1;
        } else if count(lf, "crashes_after_bucket") > 0 {
            after_bucket += 1;
        } else if seeded && count(rb, "crashes") > 0 && count(rb, "steps_recomputed") == count(rb, "crashes") {
            redrawn += 1;
        } else {
            // Every crash costs rollback one redo; more redos undid damage found in its step.
            assert!(
                count(rb, "steps_recomputed") > count(rb, "crashes"),
                "{key:?}: rollback and lossy forward differ without a crash after a bucket or a step rollback undid"
            );
            undone += 1;
        }
    }
    let what = format!("{after_bucket} apart after a bucket, {undone} by an undone step, {redrawn} by redrawn sums, {alike} alike");
    assert!(after_bucket > 0 && undone > 0 && alike > 0 && (seeded || redrawn == 0), "{what}");
    eprintln!("{what}");
}

/// The one-sided 95% Clopper–Pearson upper bound of k events in n runs, from the binomial tail
/// by bisection (independent of the report's beta quantiles): the p at which P(X <= k) = 0.05.
fn rate_upper(k: u64, n: u64) -> f64 {
    if k == n {
        return 1.0;
    }
    let cdf = |p: f64| {
        let mut term = (1.0 - p).powi(n as i32);
        let mut sum = term;
        for i in 0..k {
            term *= (n - i) as f64 / (i + 1) as f64 * p / (1.0 - p);
            sum += term;
        }
        sum
    };
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if cdf(mid) > 0.05 { lo = mid } else { hi = mid }
    }
    hi
}

#[test]
fn every_decided_choice_passes_the_catastrophe_rate_rule_and_states_golden_runs() {
    assert!((rate_upper(0, 30) - (1.0 - 0.05f64.powf(1.0 / 30.0))).abs() < 1e-12, "the check's own bound");
    for study in STUDIES {
        let c = campaign(study);
        let budget = c["campaign"].get("catastrophe_budget_pct").and_then(|v| v.as_float()).unwrap_or(10.0);
        let cells = read(&dir(study).join("cells_study.csv"));
        for ch in read(&dir(study).join("which_strategy.csv")) {
            if ch["decided"] != "true" {
                assert!(ch["choice"].starts_with("undecided") || ch["choice"].contains(" = "), "{study}: {ch:?}");
                continue;
            }
            for option in ch["chosen"].split(';') {
                let cell = cells.iter().find(|x| x["condition"] == ch["condition"] && x["option"] == option).unwrap();
                let (k, n): (u64, u64) = (cell["catastrophic"].parse().unwrap(), cell["runs"].parse().unwrap());
                let bound = 100.0 * rate_upper(k, n);
                assert!(bound < budget, "{study}: {} chose {option} with {k} of {n} catastrophes (bound {bound:.1}%)", ch["condition"]);
            }
        }
    }
}

#[test]
fn no_committed_cell_of_runs_with_cached_steps_shows_a_wall_overhead() {
    let paper = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper");
    let mut checked = 0;
    for preset in std::fs::read_dir(&paper).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("cells.csv").is_file()) {
        let runs = read(&preset.join("runs.csv"));
        let cached = |r: &BTreeMap<String, String>| {
            ["shortcut_prefix_steps", "shortcut_remainder_steps"].iter().any(|k| r.get(*k).is_some_and(|v| !v.is_empty() && v != "0"))
        };
        if !runs.iter().any(cached) {
            continue;
        }
        checked += 1;
        for cell in read(&preset.join("cells.csv")) {
            let wall = &cell["time_overhead_pct"];
            assert!(
                wall.is_empty() || wall.parse::<f64>().unwrap() >= 0.0,
                "{}: a negative wall overhead {wall}: {cell:?}",
                preset.display()
            );
        }
    }
    assert!(checked >= 2, "the studies took cached steps: {checked} presets checked");
}
