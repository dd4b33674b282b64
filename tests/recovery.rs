//! Mid-run faults and recovery strategies through the CLI on a tiny 2-worker run.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;

use common::{TINY, assert_clean_error, run, train_summary, write};

/// Two replicas, checkpoints at steps 3 and 6, and `extra` (faults, recovery).
fn train(dir: &Path, name: &str, extra: &str) -> serde_json::Value {
    train_with(dir, name, "", extra)
}

/// [`train`] with `parallel` added to the `[parallel]` table.
fn train_with(dir: &Path, name: &str, parallel: &str, extra: &str) -> serde_json::Value {
    train_summary(
        dir,
        name,
        &format!("{TINY}\n[parallel]\nworkers = 2\n{parallel}\n[checkpoint]\nevery_steps = 3\nkeep_last = 0\n\n{extra}"),
    )
}

/// The exponent's top bit of 40 values in worker 1's first residual block at step 5: values
/// below 1 in magnitude become about 1e38 and the loss NaN.
const NAN_FAULT: &str = "[[fault]]\ntarget = \"weights\"\nat_step = 5\nworker = 1\ninjection_tries = 40\nsampling = \"per_element\"\nfirst_bit = 1\nlast_bit = 1\nallow_sign_change = false\nlocations_to_corrupt = [\"model/layer1\"]\n";

fn strategy(s: &str) -> String {
    format!("{NAN_FAULT}\n[recovery]\nstrategy = \"{s}\"\n")
}

#[test]
fn each_strategy_does_what_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let golden = train(dir.path(), "golden", "");
    assert_eq!(golden["status"], "completed");
    assert_eq!(golden["faults_injected"], 0);

    let none = train(dir.path(), "none", &strategy("none"));
    assert_eq!(none["faults_injected"], 1);
    assert_eq!(none["detections"][0]["step"], 5, "detected in the step of the fault");
    assert_eq!(none["detections"][0]["latency_steps"], 0);
    assert_eq!(none["collapsed"], true, "unprotected, the NaN spreads through the all-reduce");
    let log = std::fs::read_to_string(dir.path().join("none/faults.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 1);
    assert!(log.contains("model/layer1/"));

    let rollback = train(dir.path(), "rollback", &strategy("rollback"));
    assert_eq!(rollback["detections"][0]["decision"]["action"], "redo_step");
    assert_eq!(rollback["steps_recomputed"], 1);
    assert_eq!(rollback["final_params_digest"], golden["final_params_digest"], "a transient fault rolled back leaves no trace");
    assert_eq!(rollback["acc_loss_vs_golden"], 0.0);
    assert_eq!(rollback["final_param_distance"], 0.0);
    // One golden run served every faulty run: the cache holds one entry.
    let cached: Vec<_> = std::fs::read_dir(dir.path().join("golden-cache")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert_eq!(none["golden"]["final_test_acc"], golden["final_test_acc"]);
    let compare = std::fs::read_to_string(dir.path().join("none/compare.csv")).unwrap();
    assert!(compare.starts_with("step,test_acc,golden_test_acc,acc_loss_frac,param_distance"), "{compare}");
    assert_eq!(compare.lines().count(), 3, "evaluations at steps 4 and 8: {compare}");

    let restart = train(dir.path(), "restart", &strategy("checkpoint_restart"));
    assert_eq!(restart["restarts"][0]["at_step"], 5);
    assert_eq!(restart["restarts"][0]["to_step"], 3, "the newest checkpoint before the fault");
    assert_eq!(restart["steps_lost"], 1, "step 4 was thrown away");
    assert_eq!(restart["final_params_digest"], golden["final_params_digest"]);

    let lossy = train(dir.path(), "lossy", &strategy("lossy_forward"));
    let action = lossy["detections"][0]["decision"]["action"].as_str().unwrap().to_string();
    assert!(action == "drop_contribution" || action == "resync", "{action}");
    assert_eq!(lossy["collapsed"], false);
    assert_eq!(lossy["steps_recomputed"], 0);
    assert_ne!(lossy["final_params_digest"], golden["final_params_digest"], "lossy: the step ran on one worker's gradient");
}

#[test]
fn a_crash_fails_an_unprotected_run_and_each_strategy_recovers_its_own_way() {
    let dir = tempfile::tempdir().unwrap();
    let crash = "[[fault]]\ntarget = \"crash\"\nat_step = 5\nworker = 1\n";
    let none = train(dir.path(), "none", crash);
    assert_eq!(none["status"], "failed");
    let with = |s: &str| train(dir.path(), s, &format!("{crash}\n[recovery]\nstrategy = \"{s}\"\n"));
    let lossy = with("lossy_forward");
    assert_eq!(lossy["status"], "completed");
    assert_eq!(lossy["steps"], 8);
    assert_eq!(lossy["detections"][0]["kind"], "crash");
    let golden = train(dir.path(), "golden", "");
    let restart = with("checkpoint_restart");
    assert_eq!((restart["steps_lost"].as_u64(), restart["restarts"][0]["to_step"].as_u64()), (Some(1), Some(3)));
    assert_eq!(restart["final_params_digest"], golden["final_params_digest"], "a restart recomputes every shard");
    let rollback = with("rollback");
    assert_eq!(rollback["status"], "completed");
    assert_eq!(rollback["steps_recomputed"], 1);
    assert_ne!(rollback["final_params_digest"], restart["final_params_digest"], "the redo averages the survivor only");
    assert_ne!(rollback["final_params_digest"], golden["final_params_digest"]);
}

#[test]
fn bad_fault_entries_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let go = |extra: &str| {
        let cfg = write(dir.path(), "bad.toml", &format!("{TINY}\n{extra}"));
        run(&["train", "--config", cfg.to_str().unwrap(), "--out", dir.path().join("o").to_str().unwrap(), "--quiet"])
    };
    assert_clean_error(&go("[[fault]]\nat_step = 2\n"), &["fault[0].target"]);
    assert_clean_error(&go("[[fault]]\ntarget = \"weights\"\nat_step = 2\nfirst_bit = 40\nfloat_precision = 32\n"), &["fault[0]"]);
    assert_clean_error(&go("[[fault]]\ntarget = \"weights\"\nat_step = 2\nworker = 3\n"), &["fault[0].worker"]);
    assert_clean_error(&go("[recovery]\nstrategy = \"pray\"\n"), &["pray", "rollback"]);
    assert_clean_error(
        &go("[[fault]]\ntarget = \"neurons\"\nat_step = 2\nlocations_to_corrupt = [\"neurons/layer7\"]\n"),
        &["fault[0].locations_to_corrupt", "neurons/layer1/0"],
    );
}

#[test]
fn a_neuron_fault_is_logged_and_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let golden = train(dir.path(), "golden", "");
    let fault = "[[fault]]\ntarget = \"neurons\"\nat_step = 5\nworker = 1\ninjection_tries = 200\nsampling = \"per_element\"\nfirst_bit = 1\nlast_bit = 1\nallow_sign_change = false\nlocations_to_corrupt = [\"neurons/layer1\"]\n";
    let s = train(dir.path(), "neurons", &format!("{fault}\n[recovery]\nstrategy = \"rollback\"\n"));
    assert_eq!(s["faults_injected"], 1);
    assert_eq!(s["detections"][0]["step"], 5);
    assert_eq!(s["final_params_digest"], golden["final_params_digest"]);
    let log = std::fs::read_to_string(dir.path().join("neurons/faults.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 1);
    assert!(log.contains("\"target\":\"neurons\"") && log.contains("neurons/layer1/"), "{log}");
}

#[test]
fn a_checkpoint_fault_alters_the_file_and_training_restarts_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let golden = train(dir.path(), "golden", "");
    let fault_in = |w: usize| {
        format!(
            "[[fault]]\ntarget = \"checkpoint\"\nat_step = 6\nworker = {w}\ninjection_tries = 10\nscaling_factor = 1000.0\nlocations_to_corrupt = [\"model/layer1\"]\n"
        )
    };
    // Rank 1's weights are overwritten by rank 0's at the restart (DDP's broadcast): no trace.
    let erased = train(dir.path(), "erased", &fault_in(1));
    assert_eq!(erased["restarts"][0]["to_step"], 6);
    assert_eq!(erased["final_params_digest"], golden["final_params_digest"], "the DDP broadcast erases a flip in rank 1's weights");
    // The published method on rank 0's file: load the altered checkpoint and train on.
    let fault = &fault_in(0);
    let none = train(dir.path(), "none", fault);
    assert_eq!(none["faults_injected"], 1);
    assert_eq!(none["detections"][0]["kind"], "checksum_mismatch");
    assert_eq!(none["detections"][0]["decision"]["action"], "continue");
    assert_eq!(none["restarts"][0]["to_step"], 6);
    assert_eq!(none["steps_lost"], 0);
    assert_ne!(none["final_params_digest"], golden["final_params_digest"]);
    let log = std::fs::read_to_string(dir.path().join("none/faults.jsonl")).unwrap();
    assert!(log.contains("\"target\":\"checkpoint\"") && log.contains("/model/layer1/"), "{log}");
    // A protected run finds the digest mismatch and falls back to the checkpoint before.
    let restart = train(dir.path(), "restart", &format!("{fault}\n[recovery]\nstrategy = \"checkpoint_restart\"\n"));
    assert_eq!(restart["detections"][0]["decision"]["action"], "fall_back_to_older_checkpoint");
    assert_eq!(restart["restarts"][0]["to_step"], 3);
    assert_eq!(restart["steps_lost"], 3);
    assert_eq!(restart["final_params_digest"], golden["final_params_digest"]);
}

#[test]
fn simulated_time_is_deterministic_with_modelled_compute_and_charges_each_strategy_its_cost() {
    let dir = tempfile::tempdir().unwrap();
    let modelled = "[parallel.compute]\ngflops = 20.0\n";
    let go = |name: &str, extra: &str| train(dir.path(), name, &format!("{extra}\n{modelled}"));
    let (a, b) = (go("golden-a", ""), go("golden-b", ""));
    assert_eq!(a["simulated_s"], b["simulated_s"], "the same on every run: no measured time enters");
    assert!(a["simulated_s"].as_f64().unwrap() > 0.0);
    // Checkpoint writes cost storage time: the golden run (no checkpoints) is the baseline.
    let none = go("none", &strategy("none"));
    assert!(none["simulated_storage_s"].as_f64().unwrap() > 0.0 && none["simulated_snapshot_s"] == 0.0);
    let rollback = go("rollback", &strategy("rollback"));
    let rollback2 = go("rollback2", &strategy("rollback"));
    assert_eq!(rollback["simulated_s"], rollback2["simulated_s"]);
    // Rollback copies its state before every step and redoes one step.
    let snap = rollback["simulated_snapshot_s"].as_f64().unwrap();
    assert!(snap > 0.0, "{rollback}");
    assert!(rollback["simulated_redo_s"].as_f64().unwrap() > 0.0);
    let lossy = go("lossy", &strategy("lossy_forward"));
    assert_eq!(lossy["simulated_snapshot_s"], 0.0, "lossy forward keeps no copy");
    // A NaN is seen by the step's own checks: no detector timeout, no communicator change.
    for s in [&rollback, &lossy] {
        assert_eq!((s["simulated_detect_s"].as_f64(), s["simulated_rebuild_s"].as_f64()), (Some(0.0), Some(0.0)), "{s}");
    }
    let over = |s: &serde_json::Value| s["simulated_overhead_vs_golden"].as_f64().unwrap();
    assert!(over(&rollback) > over(&lossy), "rollback pays its copies and its redo: {} vs {}", over(&rollback), over(&lossy));
    let restart = go("restart", &strategy("checkpoint_restart"));
    assert!(over(&restart) > over(&lossy), "a restart recomputes a step and reloads");
}

/// A silent flip (low mantissa bits of worker 1's weights at step 2, no NaN) is found only by
/// the replica digests at step 4, after the checkpoint at step 3 stored it. Restarting from
/// that checkpoint brings the damage back at step 4; the restart after that goes to an older
/// state (here the initial one), and the run completes as the golden run does instead of
/// restarting from step 3 for ever.
#[test]
fn damage_stored_in_a_checkpoint_before_its_detection_sends_the_next_restart_further_back() {
    let dir = tempfile::tempdir().unwrap();
    let keep = "broadcast_on_restart = \"nothing\"\n";
    let detect = "[detect]\ndivergence_every = 4\n";
    let golden = train_with(dir.path(), "golden", keep, detect);
    let silent = "[[fault]]\ntarget = \"weights\"\nat_step = 2\nworker = 1\ninjection_tries = 10\nfirst_bit = 20\nlast_bit = 30\nlocations_to_corrupt = [\"model/layer1\"]\n";
    let restart = train_with(dir.path(), "restart", keep, &format!("{silent}\n[recovery]\nstrategy = \"checkpoint_restart\"\n\n{detect}"));
    assert_eq!(restart["status"], "completed", "{restart}");
    let restarts = restart["restarts"].as_array().unwrap();
    assert_eq!(restarts.len(), 2, "{restarts:?}");
    assert_eq!((&restarts[0]["at_step"], &restarts[0]["to_step"]), (&4.into(), &3.into()), "first to the newest checkpoint");
    assert_eq!((&restarts[1]["at_step"], &restarts[1]["to_step"]), (&4.into(), &0.into()), "the damage came back: further back");
    assert!(restart["detections"].as_array().unwrap().iter().all(|d| d["step"] == 4), "{}", restart["detections"]);
    assert_eq!(restart["steps_lost"], 3, "steps 1-3 of the first run; the first restart lost none");
    assert_eq!(restart["final_params_digest"], golden["final_params_digest"], "the rerun from the start met no fault");
}

#[test]
fn a_second_crash_soon_after_a_restart_goes_back_to_the_newest_checkpoint_only() {
    // Two workers crash in step 5, the second later in the step: the first stops the step and
    // the job restarts from step 3's checkpoint; the second strikes in the next step run, step 4,
    // before the run is past step 5 again. A crash leaves no damage in the checkpoint, so the
    // second restart goes to step 3's checkpoint again, not further back.
    let dir = tempfile::tempdir().unwrap();
    let crashes = "[[fault]]\ntarget = \"crash\"\nat_step = 5\nworker = 0\nat_fraction = 0.1\n\n\
                   [[fault]]\ntarget = \"crash\"\nat_step = 5\nworker = 1\nat_fraction = 0.9\n";
    let s = train(dir.path(), "twice", &format!("{crashes}\n[recovery]\nstrategy = \"checkpoint_restart\"\n"));
    assert_eq!(s["status"], "completed", "{s}");
    let restarts = s["restarts"].as_array().unwrap();
    let at: Vec<(u64, u64)> = restarts.iter().map(|r| (r["at_step"].as_u64().unwrap(), r["to_step"].as_u64().unwrap())).collect();
    assert_eq!(at, [(5, 3), (4, 3)], "{restarts:?}");
}

/// Buckets of 4 KiB: the tiny model's gradients go in several buckets, as ResNet-8's do at the
/// default size.
const SMALL_BUCKETS: &str = "bucket_mb = 0.004\n";

/// A crash of worker 1 at step 5, at `when` (`phase = ...` or `at_fraction = ...`).
fn crash_at(when: &str) -> String {
    format!("[[fault]]\ntarget = \"crash\"\nat_step = 5\nworker = 1\n{when}\n")
}

/// Recovery by `s`, the crash costs scaled to the tiny run's millisecond steps: a detection of
/// 0.2 s, a rebuild of 0.1 s and a relaunch of 0.5 s.
fn under(s: &str, extra: &str) -> String {
    format!(
        "[recovery]\nstrategy = \"{s}\"\ndetect_timeout_s = 0.2\nrebuild_s = 0.1\nrelaunch_s = 0.5\n{extra}\n[parallel.compute]\ngflops = 20.0\n"
    )
}

#[test]
fn a_crash_after_the_first_bucket_is_applied_separates_all_three_strategies() {
    let dir = tempfile::tempdir().unwrap();
    let crash = crash_at("phase = \"update\"\nbucket = 0\n");
    let go = |s: &str| train_with(dir.path(), s, SMALL_BUCKETS, &format!("{crash}\n{}", under(s, "")));
    let (rollback, lossy, restart) = (go("rollback"), go("lossy_forward"), go("checkpoint_restart"));
    let digest = |s: &serde_json::Value| s["final_params_digest"].as_str().unwrap().to_string();
    // Lossy forward keeps bucket 0's update, which holds the crashed worker's gradient, and
    // reduces the later buckets over the survivor; rollback redoes the whole step over the
    // survivor; checkpoint-restart recomputes steps 4 and 5 on both workers.
    assert_ne!(digest(&rollback), digest(&lossy));
    assert_ne!(digest(&rollback), digest(&restart));
    assert_ne!(digest(&lossy), digest(&restart));
    let golden = train_with(dir.path(), "golden", SMALL_BUCKETS, "[parallel.compute]\ngflops = 20.0\n");
    assert_eq!(digest(&restart), digest(&golden), "a restart recomputes every shard");
    for s in [&rollback, &lossy, &restart] {
        assert_eq!(s["status"], "completed");
        assert_eq!(s["detections"][0]["kind"], "crash");
    }
}

#[test]
fn a_crash_before_any_bucket_completes_gives_rollback_and_lossy_forward_the_same_update() {
    let dir = tempfile::tempdir().unwrap();
    let crash = crash_at("phase = \"forward\"\n");
    let go = |name: &str, s: &str, extra: &str| train_with(dir.path(), name, SMALL_BUCKETS, &format!("{crash}\n{}", under(s, extra)));
    let (rollback, lossy) = (go("rollback", "rollback", ""), go("lossy", "lossy_forward", ""));
    // No bucket was reduced before the crash, so lossy forward reduces every bucket over the
    // survivor: the same gradients (same weights, same shard, deterministic kernels) that
    // rollback's redo computes again, dropping the crashed worker's shard. Only the cost differs.
    assert_eq!(rollback["final_params_digest"], lossy["final_params_digest"]);
    assert!(rollback["simulated_s"].as_f64().unwrap() > lossy["simulated_s"].as_f64().unwrap());
    // Rebalanced, the redo spreads the lost shard over the survivor: another update.
    let rebalanced = go("rebalanced", "rollback", "rebalance = true\n");
    assert_ne!(rebalanced["final_params_digest"], rollback["final_params_digest"]);
}

#[test]
fn the_simulated_clock_charges_each_strategy_what_it_did_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let crash = crash_at("at_fraction = 0.5\n");
    let go = |s: &str| train_with(dir.path(), s, SMALL_BUCKETS, &format!("{crash}\n{}", under(s, "")));
    let f = |s: &serde_json::Value, k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{k}: {s}"));
    let golden = train_with(dir.path(), "golden", SMALL_BUCKETS, "[parallel.compute]\ngflops = 20.0\n");
    let step_s = f(&golden, "simulated_s") / 8.0;
    let rollback = go("rollback");
    // The abandoned attempt ran half a step; the copy is charged every step; the crashed
    // worker gets a survivor's state over the network.
    let redo = f(&rollback, "simulated_redo_s");
    assert!(redo > 0.3 * step_s && redo < 0.7 * step_s, "{redo} vs a step of {step_s}");
    // The fault log records when in its step the crash struck: the abandoned attempt's length.
    let log = std::fs::read_to_string(dir.path().join("rollback/faults.jsonl")).unwrap();
    let crash: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(crash["event"]["target"], "crash");
    assert!((crash["crash_at_s"].as_f64().unwrap() - redo).abs() < 1e-12, "{crash} vs {redo}");
    assert!(f(&rollback, "simulated_snapshot_s") > 0.0);
    assert!(f(&rollback, "simulated_transfer_s") > 0.0);
    assert_eq!(f(&rollback, "simulated_relaunch_s"), 0.0);
    let lossy = go("lossy_forward");
    assert_eq!((f(&lossy, "simulated_redo_s"), f(&lossy, "simulated_snapshot_s")), (0.0, 0.0));
    assert_eq!(f(&lossy, "simulated_transfer_s"), f(&rollback, "simulated_transfer_s"));
    let restart = go("checkpoint_restart");
    assert_eq!(f(&restart, "simulated_relaunch_s"), 0.5, "one relaunch");
    // A process died: the restart relaunches the job, even though in-place reloads are on.
    assert_eq!((restart["relaunches"].as_u64(), restart["in_place_reloads"].as_u64()), (Some(1), Some(0)), "{restart}");
    // Every strategy that goes on waits once for the failure detector. Rollback and lossy
    // forward rebuild the communicator twice (without worker 1, then with its respawn);
    // checkpoint-restart's relaunch sets up a new one.
    for (s, rebuilds) in [(&rollback, 0.2), (&lossy, 0.2), (&restart, 0.0)] {
        assert_eq!((f(s, "simulated_detect_s"), f(s, "simulated_rebuild_s")), (0.2, rebuilds), "{}", s["strategy"]);
    }
    let lost = f(&restart, "simulated_crash_lost_s");
    assert!(lost > 0.3 * step_s && lost < 0.7 * step_s, "{lost} vs a step of {step_s}");
    assert_eq!(f(&restart, "simulated_transfer_s"), 0.0, "every worker reloads the checkpoint");
    assert!(f(&restart, "simulated_s") > f(&rollback, "simulated_s") && f(&rollback, "simulated_s") > f(&lossy, "simulated_s"));
}

/// A silent flip (worker 1's weights at step 5, no NaN) found by the replica digests at the
/// same step, while every process is alive: checkpoint-restart reloads the step-3 checkpoint in
/// place (the read and the lost step charged, no relaunch), as real jobs do. With
/// `recovery.in_place_reload = false` the same restart relaunches the job, and costs exactly one
/// relaunch more.
#[test]
fn a_silent_flip_found_by_the_digests_reloads_the_checkpoint_in_place_without_a_relaunch() {
    let dir = tempfile::tempdir().unwrap();
    let detect = "[detect]\ndivergence_every = 5\n";
    let silent = "[[fault]]\ntarget = \"weights\"\nat_step = 5\nworker = 1\ninjection_tries = 10\nfirst_bit = 20\nlast_bit = 30\nlocations_to_corrupt = [\"model/layer1\"]\n";
    let go =
        |name: &str, extra: &str| train_with(dir.path(), name, "", &format!("{silent}\n{}\n{detect}", under("checkpoint_restart", extra)));
    let f = |s: &serde_json::Value, k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{k}: {s}"));
    let counts = |s: &serde_json::Value| (s["relaunches"].as_u64(), s["in_place_reloads"].as_u64());
    let alive = go("in-place", "");
    assert_eq!(alive["status"], "completed", "{alive}");
    assert_eq!(alive["detections"][0]["kind"], "replica_divergence", "{}", alive["detections"]);
    assert_eq!((&alive["restarts"][0]["at_step"], &alive["restarts"][0]["to_step"]), (&5.into(), &3.into()));
    assert_eq!(counts(&alive), (Some(0), Some(1)), "{alive}");
    assert_eq!(f(&alive, "simulated_relaunch_s"), 0.0, "no process died: no relaunch");
    assert_eq!((f(&alive, "simulated_detect_s"), f(&alive, "simulated_rebuild_s")), (0.0, 0.0), "found by a check, not a timeout");
    // The reload reads the checkpoint at storage bandwidth: one read of the state beside the
    // writes, each as long as the golden run's writes.
    let golden = train_with(dir.path(), "golden", "", &format!("[parallel.compute]\ngflops = 20.0\n\n{detect}"));
    let write_s = f(&golden, "simulated_storage_s") / f(&golden, "checkpoints");
    let storage = f(&alive, "simulated_storage_s");
    let expected = (f(&alive, "checkpoints") + 1.0) * write_s;
    assert!(write_s > 0.0 && (storage - expected).abs() < 1e-9 * expected, "{storage} vs {expected}");
    assert!(f(&alive, "simulated_s") > f(&golden, "simulated_s") + write_s, "the read and the lost step are charged");
    // A runtime that cannot reload in place relaunches for the same restart.
    let relaunched = go("relaunched", "in_place_reload = false\n");
    assert_eq!(counts(&relaunched), (Some(1), Some(0)), "{relaunched}");
    assert_eq!(f(&relaunched, "simulated_relaunch_s"), 0.5);
    let more = f(&relaunched, "simulated_s") - f(&alive, "simulated_s");
    assert!((more - 0.5).abs() < 1e-9, "one relaunch more: {more}");
    assert_eq!(relaunched["final_params_digest"], alive["final_params_digest"], "the same training either way");
}

/// Rollback keeps one step's copy. A silent flip (worker 1's weights at step 2, no NaN) found
/// by the replica digests at step 4 is older than that copy: rollback cannot undo it, so it
/// re-synchronises the diverged replica from a healthy one (the majority's digest) and goes on,
/// as lossy forward does; the damage already averaged into steps 2-4 stays.
#[test]
fn late_detected_damage_is_beyond_rollback_so_it_resyncs_the_diverged_replica() {
    let dir = tempfile::tempdir().unwrap();
    let detect = "[detect]\ndivergence_every = 4\n";
    let silent = "[[fault]]\ntarget = \"weights\"\nat_step = 2\nworker = 1\ninjection_tries = 10\nfirst_bit = 20\nlast_bit = 30\nlocations_to_corrupt = [\"model/layer1\"]\n";
    let cfg = |s: &str| format!("{silent}\n[recovery]\nstrategy = \"{s}\"\n\n{detect}");
    let rollback = train_with(dir.path(), "rollback", "", &cfg("rollback"));
    let d = &rollback["detections"][0];
    assert_eq!(
        (d["kind"].as_str(), d["step"].as_u64(), d["latency_steps"].as_u64()),
        (Some("replica_divergence"), Some(4), Some(2)),
        "{d}"
    );
    assert_eq!(d["decision"]["action"], "resync");
    assert_eq!(rollback["steps_recomputed"], 0, "no redo: the damage predates the copy");
    assert_eq!(rollback["status"], "completed");
    // Found at the digests' cadence, not by a timeout; the re-synced replica never left the job.
    assert_eq!((rollback["simulated_detect_s"].as_f64(), rollback["simulated_rebuild_s"].as_f64()), (Some(0.0), Some(0.0)));
    let golden = train_with(dir.path(), "golden", "", detect);
    assert_ne!(rollback["final_params_digest"], golden["final_params_digest"], "the damaged gradients of steps 2-4 stay in the average");
}

#[test]
fn compare_says_what_each_strategy_did_in_one_unit_and_that_one_run_decides_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Worker 1 crashes during bucket 2's all-reduce at step 5: buckets 0 and 1 are complete.
    let crash = crash_at("phase = \"allreduce\"\nbucket = 2\n");
    let text = format!(
        "{TINY}\n[parallel]\nworkers = 2\n{SMALL_BUCKETS}\n[checkpoint]\nevery_steps = 3\nkeep_last = 0\n\n{crash}\n{}",
        under("none", "")
    );
    let cfg = write(dir.path(), "compare.toml", &text);
    let out = dir.path().join("cmp");
    common::backends::command(&run, "compare", dir.path(), &cfg, &out, &[]);
    let table = std::fs::read_to_string(out.join("table.txt")).unwrap();
    let line = |s: &str| table.lines().find(|l| l.starts_with(&format!("{s} "))).unwrap_or_else(|| panic!("{s}: {table}"));
    assert!(table.contains("test acc %") && table.contains("acc loss pts") && table.contains("what it did"), "{table}");
    assert!(line("none").ends_with("failed at step 5 (crash)"), "{table}");
    assert!(line("checkpoint_restart").ends_with("restarted from step 3 at step 5"), "{table}");
    assert!(line("rollback").contains("rolled back step 5 and redid it without rank 1; respawned rank 1 from rank 0"), "{table}");
    let lossy = line("lossy_forward");
    assert!(lossy.contains("kept 2 of ") && lossy.contains("buckets of step 5, reduced the rest without rank 1"), "{table}");
    // The last line names the cheapest strategy within the budget on this run, and says that
    // one run decides nothing, with the size of one test image in points.
    let last = table.lines().last().unwrap();
    assert!(last.starts_with("On this run, the cheapest strategy within 0.5 points"), "{last}");
    assert!(last.contains("One run decides nothing: one test image is 1.56 points here"), "{last}");
    // strategies.csv has the actions too.
    let csv = std::fs::read_to_string(out.join("strategies.csv")).unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",actions"), "{csv}");
    // strategies.csv and every run's summary.json and metrics.csv name their units.
    assert!(common::units::check_dir(&out, &common::units::table()) >= 9);
}
