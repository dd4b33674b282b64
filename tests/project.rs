//! `resilab project` against simulated runs: at 4, 8 and 16 workers each strategy's projected
//! overhead is within 10% of what the simulation charged for the same crashes.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;

use common::{TINY, run, train_config, write};

const STEPS: u64 = 50;
const EVERY: u64 = 5;

/// Five crashes in 50 steps (a system MTBF of 10 steps), placed as a stratified sample of the
/// uniform positions the projection averages over: their steps fall 0-4 completed steps after
/// the newest checkpoint (every 5 steps) and their times at 0.1 ... 0.9 of the step.
fn crashes(workers: usize) -> String {
    let at = [(8, 0.1), (17, 0.7), (26, 0.3), (35, 0.9), (44, 0.5)];
    at.iter()
        .enumerate()
        .map(|(i, (step, f))| {
            format!("[[fault]]\ntarget = \"crash\"\nat_step = {step}\nat_fraction = {f}\nworker = {}\n", (i + 1) % workers)
        })
        .collect()
}

fn config(dir: &Path, workers: usize, strategy: &str, faults: &str) -> std::path::PathBuf {
    let tiny = TINY.replace("steps = 8", &format!("steps = {STEPS}")).replace("eval_every = 4", "eval_every = 50");
    let text = format!(
        "{tiny}\nmomentum = 0.9\n[parallel]\nworkers = {workers}\nbucket_mb = 0.004\ncompute = {{ gflops = 20.0 }}\n\
         [checkpoint]\nevery_steps = {EVERY}\nkeep_last = 2\n[recovery]\nstrategy = \"{strategy}\"\nrelaunch_s = 0.002\n\n{faults}"
    );
    write(dir, &format!("{strategy}-{workers}.toml"), &text)
}

fn simulated_overhead(dir: &Path, workers: usize, strategy: &str) -> f64 {
    let cfg = config(dir, workers, strategy, &crashes(workers));
    let out = dir.join(format!("{strategy}-{workers}"));
    let s = train_config(&cfg, &out, &dir.join("golden"));
    assert_eq!(s["status"], "completed", "{s}");
    assert_eq!(s["detections"].as_array().unwrap().len(), 5, "{}", s["detections"]);
    s["simulated_overhead_vs_golden"].as_f64().unwrap()
}

fn projected(dir: &Path, workers: usize) -> Vec<serde_json::Value> {
    let cfg = config(dir, workers, "none", "");
    let n = workers.to_string();
    let mtbf = (STEPS / 5).to_string();
    let o = run(&[
        "project",
        "--config",
        cfg.to_str().unwrap(),
        "--workers",
        &n,
        "--system-mtbf-steps",
        &mtbf,
        "--interval-steps",
        &EVERY.to_string(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn projected_overheads_match_the_simulation_within_ten_percent() {
    let dir = tempfile::tempdir().unwrap();
    for workers in [4, 8, 16] {
        let rows = projected(dir.path(), workers);
        assert_eq!(rows.len(), 4);
        for strategy in ["checkpoint_restart", "rollback", "lossy_forward"] {
            let p = rows.iter().find(|r| r["strategy"] == strategy).unwrap()["overhead"].as_f64().unwrap();
            let sim = simulated_overhead(dir.path(), workers, strategy);
            assert!((sim - p).abs() <= 0.1 * p, "{workers} workers, {strategy}: simulated {sim:.5}, projected {p:.5}");
        }
        assert!(rows.iter().find(|r| r["strategy"] == "none").unwrap()["overhead"].is_null());
    }
}
