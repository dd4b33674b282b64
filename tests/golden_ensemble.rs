//! `train.golden_ensemble`: under the seeded summation order a run with faults is measured
//! against K golden runs that differ only in `train.reduction_seed` (their mean final accuracy),
//! and records their accuracies and spread; through the CLI on the tiny run with 4 workers.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;

use common::{Args, TINY, assert_clean_error, csv_records, finished_campaign, run_args, train_config_with, train_with, write};

/// Worker 1 crashes in step 5: checkpoint-restart reloads step 3 and recomputes steps 4 and 5.
const CRASH: &str = "[[fault]]\ntarget = \"crash\"\nat_step = 5\nworker = 1\n\n[recovery]\nstrategy = \"checkpoint_restart\"\n";

/// Settings under which the members' rounding differences reach their test accuracies (at
/// the tiny run's 8 steps, learning rate 0.05 and 64 test images every member scores the same).
const SHARPER: [&str; 3] = ["optimizer.lr=0.2", "data.test_size=256", "train.steps=32"];

/// The tiny run with four replicas (so that a sum's order changes its bits), checkpoints every
/// 3 steps, the crash, [`SHARPER`], and `sets` as `--set` overrides; its golden cache is shared
/// by every run in `dir`.
fn train(dir: &Path, name: &str, sets: &[&str]) -> serde_json::Value {
    let sets: Vec<&str> = SHARPER.iter().chain(sets).copied().collect();
    let cfg = write(
        dir,
        &format!("{name}.toml"),
        &format!("{TINY}\n[parallel]\nworkers = 4\n\n[checkpoint]\nevery_steps = 3\nkeep_last = 0\n\n{CRASH}"),
    );
    let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s]).collect();
    train_config_with(&cfg, &dir.join(name), &dir.join("golden-cache"), &args)
}

fn member_digest(dir: &serde_json::Value) -> String {
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(Path::new(dir.as_str().unwrap()).join("summary.json")).unwrap()).unwrap();
    s["final_params_digest"].as_str().unwrap().to_string()
}

#[test]
fn a_seeded_run_is_measured_against_its_ensembles_mean_and_records_its_spread() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = train(d, "k3", &["train.reduction_order=\"seeded\"", "train.golden_ensemble=3"]);
    let accs: Vec<f64> = s["golden_ensemble_accs_frac"].as_array().unwrap().iter().map(|a| a.as_f64().unwrap()).collect();
    assert_eq!(accs.len(), 3, "{s}");
    let mean = accs.iter().sum::<f64>() / 3.0;
    let sd = (accs.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / 2.0).sqrt();
    assert!((s["golden_ensemble_mean_acc_frac"].as_f64().unwrap() - mean).abs() < 1e-12);
    assert!((s["golden_ensemble_sd_frac"].as_f64().unwrap() - sd).abs() < 1e-12);
    let final_acc = s["final_test_acc"].as_f64().unwrap();
    assert!((s["acc_loss_vs_golden"].as_f64().unwrap() - (mean - final_acc)).abs() < 1e-12, "{s}");
    // Member 0 is the run's own golden run, the one `golden` names.
    assert_eq!(s["golden"]["final_test_acc"].as_f64().unwrap(), accs[0]);
    let dirs = s["golden_ensemble_dirs"].as_array().unwrap();
    assert_eq!(dirs[0], s["golden"]["dir"]);
    // The members differ only in their rounding: three different sets of final weights.
    let digests: std::collections::BTreeSet<String> = dirs.iter().map(member_digest).collect();
    assert_eq!(digests.len(), 3, "{digests:?}");
    assert!(accs.iter().any(|a| *a != accs[0]), "the members' accuracies differ: {accs:?}");
    // K = 1: the summary a run had before the option, against the same (cached) member 0.
    let k1 = train(d, "k1", &["train.reduction_order=\"seeded\""]);
    for key in ["golden_ensemble_accs_frac", "golden_ensemble_mean_acc_frac", "golden_ensemble_sd_frac", "golden_ensemble_dirs"] {
        assert!(k1.get(key).is_none(), "{key} in {k1}");
    }
    assert_eq!(k1["golden"]["dir"], s["golden"]["dir"]);
    assert_eq!(k1["final_params_digest"], s["final_params_digest"], "the ensemble changes the reference, not the run");
    assert!((k1["acc_loss_vs_golden"].as_f64().unwrap() - (accs[0] - final_acc)).abs() < 1e-12);
    // `resilab train` and `resilab compare` say what their losses are measured against.
    let cfg = d.join("k3.toml");
    let sets: Vec<&str> =
        SHARPER.iter().chain(&["train.reduction_order=\"seeded\"", "train.golden_ensemble=3"]).flat_map(|s| ["--set", s]).collect();
    let o = run_args(Args::train(&cfg, &d.join("k3-again")).golden(&d.join("golden-cache")).args(sets.clone()));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let said = format!("golden ensemble of 3: mean test accuracy {mean:.4}, SD {sd:.4}, member 0 {:.4} (", accs[0]);
    assert!(stdout.contains(&said), "{stdout}");
    let out = d.join("compare");
    let args = Args::command("compare", &cfg, &out).golden(&d.join("golden-cache")).args(["--strategies", "checkpoint_restart"]).args(sets);
    let o = run_args(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = std::fs::read_to_string(out.join("table.txt")).unwrap();
    let line = format!("golden ensemble: 3 runs differing only in train.reduction_seed, mean test accuracy {:.2}%", 100.0 * mean);
    assert!(table.starts_with(&line), "{table}");
}

#[test]
fn an_ensemble_needs_the_seeded_order() {
    let out = train_with(&format!("{TINY}\n[parallel]\nworkers = 4\n"), &["--set", "train.golden_ensemble=3"]);
    assert_clean_error(&out, &["train.golden_ensemble = 3", "train.reduction_order = \"fixed\""]);
    let out = train_with(&format!("{TINY}\n[parallel]\nworkers = 4\n"), &["--set", "train.golden_ensemble=0"]);
    assert_clean_error(&out, &["train.golden_ensemble = 0"]);
}

/// A train campaign with an ensemble of 3: two strategies, one seed.
const CAMPAIGN: &str = r#"
[campaign]
kind = "train"
seeds = [7]
timeout_s = 300

[base]
data = { source = "synthetic", train_size = 128, test_size = 256, image_size = 16, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 32, batch_size = 32, eval_every = 4, reduction_order = "seeded", golden_ensemble = 3 }
optimizer = { kind = "sgd", lr = 0.2 }
parallel = { workers = 4 }
checkpoint = { every_steps = 3 }

[[base.fault]]
target = "crash"
at_step = 5
worker = 1

[grid]
"recovery.strategy" = ["checkpoint_restart", "lossy_forward"]
"#;

#[test]
fn runs_csv_records_the_ensembles_mean_and_spread_and_measures_the_loss_against_the_mean() {
    let dir = tempfile::tempdir().unwrap();
    let out = finished_campaign(dir.path(), "c", CAMPAIGN, &[]);
    let rows = csv_records(&out.join("runs.csv"));
    assert_eq!(rows.len(), 2);
    let num = |r: &std::collections::BTreeMap<String, String>, k: &str| r[k].parse::<f64>().unwrap_or_else(|e| panic!("{k}: {e} in {r:?}"));
    for r in &rows {
        let mean = num(r, "golden_ensemble_mean_acc_frac");
        assert!(num(r, "golden_ensemble_sd_frac") > 0.0, "{r:?}");
        assert!((num(r, "acc_loss_frac") - (mean - num(r, "final_acc_frac"))).abs() < 1e-9, "{r:?}");
        assert!(num(r, "golden_acc_frac") != mean, "golden_acc_frac is member 0's: {r:?}");
    }
}
