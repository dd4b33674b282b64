//! Workers lost for good, through the CLI: each `recovery.on_permanent_loss` policy ends as it
//! defines, spares run out into a shrink, a shrunk job restarts from a checkpoint of more
//! workers, and a job with nothing left fails clearly.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;

use common::{TINY, assert_clean_error, train_summary, train_with};
use serde_json::{Value, json};

/// `workers` replicas, checkpoints every 3 steps, and `extra` (faults, recovery).
fn train(dir: &Path, name: &str, parallel: &str, extra: &str) -> Value {
    train_summary(
        dir,
        name,
        &format!("{TINY}\n[parallel]\n{parallel}\ncompute = {{ gflops = 50.0 }}\n[checkpoint]\nevery_steps = 3\nkeep_last = 0\n\n{extra}"),
    )
}

/// Worker 2 of 4 lost for good at step 5, under lossy forward and `recovery`; a detection of
/// 0.2 s, a communicator rebuild of 0.1 s and a relaunch of 0.5 s.
fn lose_worker_2(dir: &Path, name: &str, parallel: &str, recovery: &str) -> Value {
    let fault = "[[fault]]\ntarget = \"crash\"\nat_step = 5\nworker = 2\npermanent = true\n";
    train(
        dir,
        name,
        &format!("workers = 4\n{parallel}"),
        &format!(
            "{fault}\n[recovery]\nstrategy = \"lossy_forward\"\ndetect_timeout_s = 0.2\nrebuild_s = 0.1\nrelaunch_s = 0.5\n{recovery}"
        ),
    )
}

/// The summary's `simulated_detect_s` and `simulated_rebuild_s`.
fn waits(s: &Value) -> (f64, f64) {
    (s["simulated_detect_s"].as_f64().unwrap(), s["simulated_rebuild_s"].as_f64().unwrap())
}

#[test]
fn each_policy_ends_a_permanent_loss_as_it_defines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let respawn = lose_worker_2(d, "respawn", "", "on_permanent_loss = \"respawn\"\n");
    let w = &respawn["workers"];
    assert_eq!(
        (w["at_start"].clone(), w["at_end"].clone(), w["permanent_losses"].clone(), w["spares_used"].clone()),
        (json!(4), json!(4), json!(1), json!(1))
    );
    assert_eq!(w["steps_at_workers"], json!({"4": 8}));
    assert!(respawn["simulated_transfer_s"].as_f64().unwrap() > 0.0, "the spare got a replica's state over the network");
    assert_eq!(respawn["restarts"], json!([]));
    let log = std::fs::read_to_string(d.join("respawn/faults.jsonl")).unwrap();
    assert!(log.contains("\"permanent\":true"), "{log}");

    // Reinit: everyone restarts from the step-3 checkpoint, with the relaunch and the read charged.
    let reinit = lose_worker_2(d, "reinit", "", "on_permanent_loss = \"reinit\"\n");
    assert_eq!((reinit["workers"]["at_end"].clone(), reinit["workers"]["reinits"].clone()), (json!(4), json!(1)));
    assert_eq!((reinit["restarts"][0]["at_step"].clone(), reinit["restarts"][0]["to_step"].clone()), (json!(6), json!(3)));
    assert_eq!(reinit["steps_lost"], 2, "steps 4 and 5 were thrown away");
    assert_eq!(reinit["simulated_relaunch_s"], 0.5);
    // Every checkpoint write and the read cost the same: 4 workers' state at the storage rate.
    let unit = respawn["simulated_storage_s"].as_f64().unwrap() / respawn["checkpoints"].as_f64().unwrap();
    let storage = reinit["simulated_storage_s"].as_f64().unwrap();
    let files = reinit["checkpoints"].as_f64().unwrap() + 1.0;
    assert!((storage - files * unit).abs() < 1e-12 * storage, "{storage} vs {files} x {unit}");
    // Every policy waits once for the detector, and lossy forward finished step 5 over the
    // survivors (one rebuild); the respawned spare joining is a second rebuild, while reinit's
    // relaunch sets up a new communicator.
    assert_eq!((waits(&respawn), waits(&reinit)), ((0.2, 0.2), (0.2, 0.1)));
    let without_rebuilds = |s: &Value| s["simulated_s"].as_f64().unwrap() - waits(s).1;
    assert!(without_rebuilds(&reinit) > without_rebuilds(&respawn) + 0.5);

    // Shrink: the three others go on, with the global batch or the per-worker batch kept.
    let keep = lose_worker_2(d, "shrink", "", "on_permanent_loss = \"shrink\"\n");
    let w = &keep["workers"];
    assert_eq!((w["at_end"].clone(), w["spares_used"].clone(), w["batch_rule"].clone()), (json!(3), json!(0), json!("keep_global")));
    assert_eq!(w["steps_at_workers"], json!({"3": 3, "4": 5}));
    assert_eq!((w["global_batch_at_end"].clone(), w["lr_scale_at_end"].clone()), (json!(32), json!(1.0)));
    assert_eq!(keep["simulated_relaunch_s"], 0.0);
    assert_eq!(waits(&keep), (0.2, 0.1), "the rebuild without the lost rank is the shrink");
    let per = lose_worker_2(d, "per-worker", "", "on_permanent_loss = \"shrink\"\nshrink_batch = \"keep_per_worker\"\n");
    assert_eq!((per["workers"]["global_batch_at_end"].clone(), per["workers"]["lr_scale_at_end"].clone()), (json!(24), json!(0.75)));
    assert_ne!(per["final_params_digest"], keep["final_params_digest"]);

    // No spare: respawn falls back to shrinking, and says so.
    let none_left = lose_worker_2(d, "no-spare", "spares = 0\n", "on_permanent_loss = \"respawn\"\n");
    let w = &none_left["workers"];
    assert_eq!((w["at_end"].clone(), w["spares_used"].clone(), w["spare_fallbacks"].clone()), (json!(3), json!(0), json!(1)));
    assert_eq!(none_left["final_params_digest"], keep["final_params_digest"], "the fallback is the shrink");
}

#[test]
fn spares_run_out_and_a_shrunk_job_restarts_from_a_larger_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let two = "[[fault]]\ntarget = \"crash\"\npermanent = true\ncount = 2\n";
    let s = train(
        dir.path(),
        "spares",
        "workers = 4\nspares = 1\n",
        &format!("{two}\n[recovery]\nstrategy = \"rollback\"\non_permanent_loss = \"respawn\"\n"),
    );
    let w = &s["workers"];
    assert_eq!(
        (w["permanent_losses"].clone(), w["spares_used"].clone(), w["spare_fallbacks"].clone(), w["at_end"].clone()),
        (json!(2), json!(1), json!(1), json!(3))
    );
    assert_eq!(s["status"], "completed");

    // Checkpoint-restart and shrink: the loss at step 4 restarts from step 3 (4 files) and
    // shrinks to 3; the loss at step 5 restarts the 3 workers from that 4-worker checkpoint.
    let faults = "[[fault]]\ntarget = \"crash\"\nat_step = 4\nworker = 3\npermanent = true\n\n[[fault]]\ntarget = \"crash\"\nat_step = 5\nworker = 0\npermanent = true\n";
    let s = train(
        dir.path(),
        "restarts",
        "workers = 4\n",
        &format!("{faults}\n[recovery]\nstrategy = \"checkpoint_restart\"\non_permanent_loss = \"shrink\"\n"),
    );
    assert_eq!(s["status"], "completed");
    let to: Vec<&Value> = s["restarts"].as_array().unwrap().iter().map(|r| &r["to_step"]).collect();
    assert_eq!(to, [&json!(3), &json!(3)]);
    assert_eq!(s["workers"]["at_end"], 2);
    assert_eq!(s["steps"], 8);
}

#[test]
fn a_job_with_no_worker_left_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let one = "[[fault]]\ntarget = \"crash\"\nat_step = 3\nworker = 1\npermanent = true\n";
    let alone = train(
        dir.path(),
        "alone",
        "workers = 2\n",
        &format!("{one}\n[recovery]\nstrategy = \"lossy_forward\"\non_permanent_loss = \"shrink\"\n"),
    );
    assert_eq!((alone["status"].clone(), alone["workers"]["at_end"].clone()), (json!("completed"), json!(1)));
    assert_eq!(alone["workers"]["steps_at_workers"], json!({"1": 5, "2": 3}));

    let both = "[[fault]]\ntarget = \"crash\"\npermanent = true\ncount = 2\n";
    let gone = train(
        dir.path(),
        "gone",
        "workers = 2\n",
        &format!("{both}\n[recovery]\nstrategy = \"lossy_forward\"\non_permanent_loss = \"shrink\"\n"),
    );
    assert_eq!(gone["status"], "failed");
    assert!(gone["failure"].as_str().unwrap().contains("the last one left"), "{}", gone["failure"]);
    assert!(gone["steps"].as_u64().unwrap() < 8);

    // A pipeline stage can only be replaced: with no spare, the run fails and says why.
    let stage = "[[fault]]\ntarget = \"crash\"\nat_step = 4\nstage = 1\npermanent = true\n";
    let pipe = "mode = \"pipeline\"\nstages = 2\nmicro_batches = 2\n";
    let recovery = "[recovery]\nstrategy = \"checkpoint_restart\"\n";
    let failed = train(dir.path(), "pipe", &format!("{pipe}spares = 0\n"), &format!("{stage}\n{recovery}"));
    assert_eq!(failed["status"], "failed");
    assert!(failed["failure"].as_str().unwrap().contains("pipeline stage 1"), "{}", failed["failure"]);
    let spared = train(dir.path(), "pipe-spare", &format!("{pipe}spares = 1\n"), &format!("{stage}\n{recovery}"));
    assert_eq!(
        (spared["status"].clone(), spared["workers"]["spares_used"].clone(), spared["workers"]["at_end"].clone()),
        (json!("completed"), json!(1), json!(2))
    );
}

#[test]
fn permanent_loss_settings_are_checked_when_read() {
    let crash = "[[fault]]\ntarget = \"crash\"\nat_step = 2\npermanent = true\n";
    let pipe = format!(
        "{TINY}\n[parallel]\nmode = \"pipeline\"\nstages = 2\n\n{crash}\n[recovery]\nstrategy = \"checkpoint_restart\"\non_permanent_loss = \"shrink\"\n"
    );
    assert_clean_error(&train_with(&pipe, &[]), &["recovery.on_permanent_loss", "pipeline"]);
    let odd = format!(
        "{TINY}\n[parallel]\nworkers = 3\n\n{crash}\n[recovery]\nstrategy = \"rollback\"\non_permanent_loss = \"shrink\"\nshrink_batch = \"keep_per_worker\"\n"
    );
    assert_clean_error(&train_with(&odd, &[]), &["recovery.shrink_batch", "not a multiple of parallel.workers = 3"]);
    let weights = format!("{TINY}\n[[fault]]\ntarget = \"weights\"\nat_step = 2\npermanent = true\n");
    assert_clean_error(&train_with(&weights, &[]), &["fault[0].permanent", "only a crash"]);
    let many = format!("{TINY}\n[parallel]\nworkers = 2\n\n[[fault]]\ntarget = \"crash\"\ncount = 3\n");
    assert_clean_error(&train_with(&many, &[]), &["fault[0].count", "2 worker(s)"]);
    let both = format!("{TINY}\n[[fault]]\ntarget = \"crash\"\ncount = 1\nat_step = 2\n");
    assert_clean_error(&train_with(&both, &[]), &["fault[0].count", "not both at_step and count"]);
}
