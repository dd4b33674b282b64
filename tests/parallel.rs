//! Simulated parallel runs through the CLI: per-worker and per-stage checkpoints, exact resume,
//! the summary's simulated time, and configuration errors.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::{Path, PathBuf};

use common::{Args, TINY, assert_clean_error, run, run_args, write};

fn config(dir: &Path, parallel: &str) -> PathBuf {
    write(dir, "par.toml", &format!("{TINY}\n[checkpoint]\nevery_steps = 4\nkeep_last = 0\n\n[parallel]\n{parallel}"))
}

fn train(cfg: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let o = run_args(Args::train(cfg, out).args(extra));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

/// Model and optimizer datasets that differ between two checkpoint files, from
/// `resilab diff --json` (train-state datasets such as the rank always differ between workers).
fn differing(a: &Path, b: &Path) -> Vec<String> {
    let o = run(&["diff", "--json", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["differ"].as_u64().unwrap() > 0)
        .map(|d| d["path"].as_str().unwrap().to_string())
        .filter(|p| p.contains("model/") || p.contains("optimizer/"))
        .collect()
}

#[test]
fn data_parallel_checkpoints_one_file_per_replica_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "workers = 4\nsync = \"horovod\"\n");
    let a = dir.path().join("a");
    let s = train(&cfg, &a, &[]);
    assert_eq!(s["parallel"], "data x4 (horovod, ring)");
    assert!(s["simulated_s"].as_f64().unwrap() > 0.0 && s["comm_bytes"].as_u64().unwrap() > 0);
    let step = a.join("checkpoints/step-00000008");
    for r in 0..4 {
        assert!(step.join(format!("worker-{r}.h5")).is_file());
    }
    // Horovod leaves BatchNorm running statistics local: the replicas agree on every weight and
    // optimizer buffer and differ only in running statistics.
    let d = differing(&step.join("worker-0.h5"), &step.join("worker-3.h5"));
    assert!(!d.is_empty() && d.iter().all(|n| n.contains("running_")), "{d:?}");
    // Resuming all four replicas from step 4 without a broadcast ends bit-identical.
    let b = dir.path().join("b");
    let at4 = a.join("checkpoints/step-00000004");
    let r = train(&cfg, &b, &["--resume", at4.to_str().unwrap(), "--set", "parallel.broadcast_on_restart=\"nothing\""]);
    assert_eq!(s["final_params_digest"], r["final_params_digest"]);
    assert!(differing(&step.join("worker-3.h5"), &b.join("checkpoints/step-00000008/worker-3.h5")).is_empty());
    // Horovod's default restart broadcasts rank 0's parameters, buffers and optimizer state: the
    // local running statistics restart from rank 0's, and nothing else changes.
    let h = dir.path().join("h");
    let r = train(&cfg, &h, &["--resume", at4.to_str().unwrap()]);
    assert_eq!(s["final_params_digest"], r["final_params_digest"]);
    let d = differing(&step.join("worker-3.h5"), &h.join("checkpoints/step-00000008/worker-3.h5"));
    assert!(!d.is_empty() && d.iter().all(|n| n.contains("running_")), "{d:?}");
    // A checkpoint of 4 replicas does not resume a run of 2.
    let c = dir.path().join("c");
    let resume = a.join("checkpoints/step-00000004");
    let o = run_args(Args::train(&cfg, &c).set("parallel.workers=2").resume_from(&resume));
    assert_clean_error(&o, &["written by 4 worker(s)", "this run has 2"]);
}

#[test]
fn ddp_replicas_share_rank_zero_buffers_at_each_forward() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "workers = 2\nsync = \"ddp\"\n");
    let a = dir.path().join("a");
    train(&cfg, &a, &[]);
    // Each replica updated the broadcast statistics with its own shard in the last forward, so
    // running statistics differ after the step, but nothing else does.
    let step = a.join("checkpoints/step-00000008");
    let d = differing(&step.join("worker-0.h5"), &step.join("worker-1.h5"));
    assert!(!d.is_empty() && d.iter().all(|n| n.contains("running_")), "{d:?}");
}

/// `samples.csv` as (step, worker, position, sample) rows.
fn samples(out: &Path) -> Vec<[usize; 4]> {
    let text = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("step,worker,position,sample"));
    lines.map(|l| <[usize; 4]>::try_from(l.split(',').map(|v| v.parse().unwrap()).collect::<Vec<_>>()).unwrap()).collect()
}

#[test]
fn recorded_samples_and_buckets_say_what_each_worker_read_and_reduced() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "workers = 2\nbucket_mb = 0.004\n");
    let a = dir.path().join("a");
    let s = train(&cfg, &a, &["--record-samples"]);
    let rows = samples(&a);
    // 8 steps of 32 images, 16 per worker, positions in order; the 128 images of an epoch (4
    // steps) are each read once, and the next epoch reads them again in another order.
    assert_eq!(rows.len(), 8 * 32);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!([r[0], r[1], r[2]], [i / 32 + 1, i % 32 / 16, i % 16], "{r:?}");
    }
    let epoch = |e: usize| rows[e * 128..(e + 1) * 128].iter().map(|r| r[3]).collect::<Vec<_>>();
    let mut first = epoch(0);
    assert_ne!(first, epoch(1));
    first.sort_unstable();
    assert_eq!(first, (0..128).collect::<Vec<_>>());
    // The buckets hold every trainable parameter once, last parameters first, each under 4 KiB
    // unless alone.
    let buckets: Vec<Vec<String>> = serde_json::from_value(s["buckets"].clone()).unwrap();
    assert!(buckets.len() > 2, "{buckets:?}");
    let names: Vec<&String> = buckets.iter().flatten().collect();
    assert_eq!(names.first().map(|n| n.as_str()), Some("classifier.fc.bias"));
    assert_eq!(names.last().map(|n| n.as_str()), Some("stem.conv.weight"));
    let unique: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
    assert_eq!(names.len(), 29, "ResNet-8's trainable tensors: {names:?}");
    // Resumed from step 4 into the same directory, the run keeps steps 1-4 and reads 5-8 again:
    // the file is the uninterrupted run's.
    let before = std::fs::read(a.join("samples.csv")).unwrap();
    let at4 = dir.path().join("at4");
    std::fs::rename(a.join("checkpoints/step-00000004"), &at4).unwrap();
    std::fs::remove_dir_all(a.join("checkpoints")).unwrap();
    train(&cfg, &a, &["--record-samples", "--resume", at4.to_str().unwrap()]);
    assert_eq!(std::fs::read(a.join("samples.csv")).unwrap(), before);
}

#[test]
fn pipeline_checkpoints_one_file_per_stage_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "mode = \"pipeline\"\nstages = 3\nmicro_batches = 4\nschedule = \"1f1b\"\n");
    let a = dir.path().join("a");
    let s = train(&cfg, &a, &["--record-samples"]);
    assert_eq!(s["parallel"], "pipeline 3 stages x 4 micro-batches (1f1b)");
    // Stage 0 reads each global batch whole; the other stages read none. A pipeline has no
    // all-reduce buckets.
    let rows = samples(&a);
    assert_eq!(rows.len(), 8 * 32);
    assert!(rows.iter().all(|r| r[1] == 0) && rows[31][2] == 31);
    assert_eq!(s["buckets"], serde_json::json!([]));
    let stages = s["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 3);
    assert_eq!(stages[0][0], "stem");
    assert_eq!(stages[2].as_array().unwrap().last().unwrap(), "classifier");
    assert!(s["final_test_acc"].as_f64().unwrap() > 0.0);
    let step = a.join("checkpoints/step-00000004");
    let listing = |f: &str| String::from_utf8_lossy(&run(&["inspect", step.join(f).to_str().unwrap()]).stdout).to_string();
    assert!(listing("worker-0.h5").contains("stem") && !listing("worker-0.h5").contains("classifier"));
    assert!(listing("worker-2.h5").contains("classifier") && !listing("worker-2.h5").contains("stem"));
    let b = dir.path().join("b");
    let r = train(&cfg, &b, &["--resume", step.to_str().unwrap()]);
    assert_eq!(s["final_params_digest"], r["final_params_digest"]);
    // Cut elsewhere, the stages hold other blocks: the error names the file and what does not fit.
    let c = dir.path().join("c");
    let o = run_args(Args::train(&cfg, &c).set("parallel.split_at=[1, 2]").resume_from(&step));
    assert_clean_error(&o, &["worker-0.h5", "no such parameter in the model"]);
}

#[test]
fn a_crashed_pipeline_stage_restarts_from_the_checkpoint_under_every_strategy() {
    // A stage has no replica (stage 0 holds other blocks): rollback and lossy forward cannot
    // respawn it from one, and restart from the checkpoint as checkpoint-restart does.
    let dir = tempfile::tempdir().unwrap();
    let crash = "[[fault]]\ntarget = \"crash\"\nat_step = 6\nworker = 1\n";
    let text =
        format!("{TINY}\n[checkpoint]\nevery_steps = 4\n\n[parallel]\nmode = \"pipeline\"\nstages = 2\nmicro_batches = 2\n\n{crash}");
    let cfg = write(dir.path(), "pipe.toml", &text);
    let mut digests = Vec::new();
    for strategy in ["checkpoint_restart", "rollback", "lossy_forward"] {
        let out = dir.path().join(strategy);
        let s = train(&cfg, &out, &["--set", &format!("recovery.strategy=\"{strategy}\"")]);
        assert_eq!(s["status"], "completed", "{strategy}");
        let restarts = s["restarts"].as_array().unwrap();
        assert_eq!(restarts.len(), 1, "{strategy}: {restarts:?}");
        assert_eq!(restarts[0]["to_step"], 4, "{strategy}");
        digests.push(s["final_params_digest"].clone());
    }
    assert!(digests.iter().all(|d| *d == digests[0]), "the same restart, the same weights: {digests:?}");
}

#[test]
fn bad_parallel_settings_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let go = |parallel: &str| {
        let cfg = config(dir.path(), parallel);
        run_args(Args::train(&cfg, &out))
    };
    assert_clean_error(&go("workers = 3\n"), &["parallel.workers = 3", "batch_size = 32"]);
    assert_clean_error(&go("mode = \"pipeline\"\nstages = 40\n"), &["parallel.stages = 40", "blocks"]);
    assert_clean_error(&go("mode = \"pipeline\"\nstages = 2\nsplit_at = [9]\n"), &["parallel.split_at", "stem"]);
    assert_clean_error(&go("mode = \"pipeline\"\nstages = 2\nmicro_batches = 3\n"), &["micro_batches = 3"]);
    assert_clean_error(&go("workers = 2\nstages = 2\n"), &["parallel.stages"]);
    assert_clean_error(&go("mode = \"ring\"\n"), &["ring", "pipeline"]);
    assert_clean_error(&go("[parallel.network]\nbandwidth_gbps = 0\n"), &["bandwidth_gbps"]);
}
