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
    // A group: every coordinate but the strategy, the training seed and the fault draw.
    let group = |r: &BTreeMap<String, String>| {
        ["parallel.workers", "recovery.rebuild_s", "fault", "seed", "rep"].iter().map(|c| r[*c].clone()).collect::<Vec<String>>()
    };
    let mut by: BTreeMap<Vec<String>, BTreeMap<String, &BTreeMap<String, String>>> = BTreeMap::new();
    for r in &runs {
        by.entry(group(r)).or_default().insert(r["recovery.strategy"].clone(), r);
    }
    let count = |r: &BTreeMap<String, String>, k: &str| r[k].parse::<u64>().unwrap();
    let (mut after_bucket, mut undone, mut alike) = (0, 0, 0);
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
        } else {
            // Every crash costs rollback one redo; more redos undid damage found in its step.
            assert!(
                count(rb, "steps_recomputed") > count(rb, "crashes"),
                "{key:?}: rollback and lossy forward differ without a crash after a bucket or a step rollback undid"
            );
            undone += 1;
        }
    }
    assert!(after_bucket > 0 && undone > 0 && alike > 0, "{after_bucket} apart after a bucket, {undone} by an undone step, {alike} alike");
}
