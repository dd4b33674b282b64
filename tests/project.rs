//! `resilab project` against simulated runs whose crashes arrive as a study draws them: a
//! Poisson process of `system_mtbf_steps` over the steps, each crash at a uniform time in its
//! step on a uniformly drawn worker. Each strategy's mean simulated overhead over the runs must
//! agree with its projection within a tolerance derived from the runs' own spread.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;

use common::{TINY, run, train_config_with, write};
use serde_json::Value;

const WORKERS: usize = 4;
const STEPS: u64 = 100;
/// The job's mean steps between crashes: about 10 crashes a run.
const MTBF_STEPS: f64 = 10.0;
const EVERY: u64 = 10;
/// Runs per strategy, each with its own fault seed (the same seeds for every strategy).
const RUNS: u64 = 10;
/// Standard errors allowed: a deterministic test that a correct projection fails with
/// probability about 6e-5 per comparison, had its seeds been drawn afresh.
const Z: f64 = 4.0;
const STRATEGIES: [&str; 3] = ["checkpoint_restart", "rollback", "lossy_forward"];

/// The tiny ResNet-8 on 4 workers at 20 GFLOP/s (a modelled step of 0.56 ms), 4 KiB buckets,
/// a checkpoint every 10 steps, crash costs scaled to its steps as the published ones are to
/// a large job's (a detection of 2 ms, a rebuild of 1 ms, a relaunch of 5 ms), and crashes
/// arriving every `MTBF_STEPS` steps on average.
fn config(dir: &Path, strategy: &str) -> std::path::PathBuf {
    let tiny = TINY.replace("steps = 8", &format!("steps = {STEPS}")).replace("eval_every = 4", &format!("eval_every = {STEPS}"));
    let text = format!(
        "{tiny}\nmomentum = 0.9\n[parallel]\nworkers = {WORKERS}\nbucket_mb = 0.004\ncompute = {{ gflops = 20.0 }}\n\
         [checkpoint]\nevery_steps = {EVERY}\nkeep_last = 2\n\
         [recovery]\nstrategy = \"{strategy}\"\ndetect_timeout_s = 0.002\nrebuild_s = 0.001\nrelaunch_s = 0.005\n\n\
         [[fault]]\ntarget = \"crash\"\nsystem_mtbf_steps = {MTBF_STEPS}\n"
    );
    write(dir, &format!("{strategy}.toml"), &text)
}

/// One run of `strategy` with fault seed `seed`: its simulated overhead and the crashes it met.
fn simulate(dir: &Path, strategy: &str, seed: u64) -> (f64, f64) {
    let cfg = config(dir, strategy);
    let out = dir.join(format!("{strategy}-{seed}"));
    let seed = format!("fault_seed={seed}");
    let s = train_config_with(&cfg, &out, &dir.join("golden"), &["--set", &seed]);
    assert_eq!(s["status"], "completed", "{s}");
    (s["simulated_overhead_vs_golden"].as_f64().unwrap(), s["faults_injected"].as_f64().unwrap())
}

/// The summary of the run [`simulate`] wrote.
fn summary(dir: &Path, strategy: &str, seed: u64) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join(format!("{strategy}-{seed}/summary.json"))).unwrap()).unwrap()
}

/// A strategy's mean overhead over its runs as a line in `recovery.rebuild_s` (the runs
/// re-priced from their events, `resilab report --set`): `(at the recorded rebuild, per second
/// of rebuild)`, each run's overhead moving by its rebuilds over its golden run's seconds.
fn overhead_line(dir: &Path, strategy: &str) -> (f64, f64) {
    let runs: Vec<(f64, f64)> = (1..=RUNS)
        .map(|seed| {
            let s = summary(dir, strategy, seed);
            let golden = s["golden"]["simulated_s"].as_f64().unwrap();
            (s["simulated_overhead_vs_golden"].as_f64().unwrap(), s["rebuilds"].as_f64().unwrap() / golden)
        })
        .collect();
    let n = runs.len() as f64;
    (runs.iter().map(|r| r.0).sum::<f64>() / n, runs.iter().map(|r| r.1).sum::<f64>() / n)
}

/// `resilab project`'s rows for the configuration, with `set` overrides.
fn projected(dir: &Path, set: &[&str]) -> Vec<Value> {
    let cfg = config(dir, "none");
    let (n, mtbf, every) = (WORKERS.to_string(), MTBF_STEPS.to_string(), EVERY.to_string());
    let mut args = vec![
        "project",
        "--config",
        cfg.to_str().unwrap(),
        "--workers",
        &n,
        "--system-mtbf-steps",
        &mtbf,
        "--interval-steps",
        &every,
        "--json",
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    let o = run(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines = String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect::<Vec<_>>();
    lines.into_iter().filter(|r| r.get("strategy").is_some()).collect()
}

fn row<'a>(rows: &'a [Value], strategy: &str) -> &'a Value {
    rows.iter().find(|r| r["strategy"] == strategy).unwrap()
}

/// The runs' mean overhead and its standard error, then the same mean adjusted for the number
/// of crashes the runs happened to meet (a control variate: the overhead regressed on the
/// crashes, read at their expectation `STEPS / MTBF_STEPS`) and its standard error. The
/// crash count is most of the runs' spread and its expectation is known exactly; what is left
/// is the spread of what each crash cost, which is what the projection models.
struct Estimate {
    mean: f64,
    se: f64,
    adjusted: f64,
    adjusted_se: f64,
}

fn estimate(runs: &[(f64, f64)]) -> Estimate {
    let n = runs.len() as f64;
    let (mo, mc) = (runs.iter().map(|r| r.0).sum::<f64>() / n, runs.iter().map(|r| r.1).sum::<f64>() / n);
    let sxx = runs.iter().map(|r| (r.1 - mc).powi(2)).sum::<f64>();
    let slope = runs.iter().map(|r| (r.0 - mo) * (r.1 - mc)).sum::<f64>() / sxx;
    let residual_var = runs.iter().map(|r| (r.0 - mo - slope * (r.1 - mc)).powi(2)).sum::<f64>() / (n - 2.0);
    let expected = STEPS as f64 / MTBF_STEPS;
    let var = runs.iter().map(|r| (r.0 - mo).powi(2)).sum::<f64>() / (n - 1.0);
    Estimate {
        mean: mo,
        se: (var / n).sqrt(),
        adjusted: mo + slope * (expected - mc),
        adjusted_se: (residual_var * (1.0 / n + (expected - mc).powi(2) / sxx)).sqrt(),
    }
}

/// Every run of every strategy, two at a time (the golden run first, once).
fn simulate_all(dir: &Path) -> Vec<Vec<(f64, f64)>> {
    simulate(dir, "lossy_forward", RUNS + 1);
    let jobs: Vec<(usize, u64)> = (0..STRATEGIES.len()).flat_map(|s| (1..=RUNS).map(move |seed| (s, seed))).collect();
    let done: Vec<(usize, (f64, f64))> = std::thread::scope(|scope| {
        let halves = jobs
            .chunks(jobs.len().div_ceil(2))
            .map(|half| scope.spawn(move || half.iter().map(|&(s, seed)| (s, simulate(dir, STRATEGIES[s], seed))).collect::<Vec<_>>()));
        halves.collect::<Vec<_>>().into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    (0..STRATEGIES.len()).map(|s| done.iter().filter(|d| d.0 == s).map(|d| d.1).collect()).collect()
}

/// The projection is first order: it charges every crash in full, while crashes that arrive in
/// the same step (or twice on one worker) share one detection, one rebuild or one restart in a
/// run. A Poisson process of rate `1 / MTBF_STEPS` per step puts its arrivals in a share
/// `(1 - e^-r) / r` of distinct steps, so the failure part of the simulated overhead may fall
/// short of the projection's by up to `1 - (1 - e^-r) / r` of it (4.8% here).
fn shared_step_allowance(projected: f64, steady: f64) -> f64 {
    let r = 1.0 / MTBF_STEPS;
    (projected - steady) * (1.0 - (1.0 - (-r).exp()) / r)
}

/// The rebuild at which checkpoint-restart and lossy forward cost the same: read from the runs
/// in `dir` re-priced at every rebuild (their mean overheads are lines in it), and as `resilab
/// project` prints it (the turn of `recovery.rebuild_s` from lossy forward to
/// checkpoint-restart). The two must agree within 10%.
fn assert_break_even_agrees(dir: &Path) {
    let recorded = 0.001;
    let ((a_cr, b_cr), (a_lf, b_lf)) = (overhead_line(dir, "checkpoint_restart"), overhead_line(dir, "lossy_forward"));
    assert!(b_lf > 0.0 && b_cr == 0.0, "lossy forward rebuilds at each crash, checkpoint-restart relaunches: {b_lf} {b_cr}");
    let from_runs = recorded + (a_cr - a_lf) / (b_lf - b_cr);
    let cfg = config(dir, "none");
    let (mtbf, every) = (MTBF_STEPS.to_string(), EVERY.to_string());
    let edge = projected_turn(&cfg, &WORKERS.to_string(), &["--system-mtbf-steps", &mtbf, "--interval-steps", &every]);
    let what = format!("break-even rebuild: {from_runs:.6} s from the re-priced runs, {edge:.6} s projected");
    assert!((from_runs - edge).abs() <= 0.1 * edge, "{what}");
    eprintln!("{what}");
}

#[test]
fn projected_overheads_match_simulated_runs_with_random_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let rows = projected(dir.path(), &[]);
    assert_eq!(rows.len(), 4);
    assert!(row(&rows, "none")["overhead_frac"].is_null());
    // The same projection without the detection and the rebuilds: what the check must tell apart.
    let without = projected(dir.path(), &["recovery.detect_timeout_s=0", "recovery.rebuild_s=0"]);
    for (strategy, runs) in STRATEGIES.iter().zip(simulate_all(dir.path())) {
        let (p, steady) = (row(&rows, strategy)["overhead_frac"].as_f64().unwrap(), row(&rows, strategy)["steady_frac"].as_f64().unwrap());
        let e = estimate(&runs);
        let what = format!(
            "{strategy}: projected {p:.4}; simulated mean {:.4} (se {:.4}), adjusted to the expected crashes {:.4} (se {:.5}); runs {runs:?}",
            e.mean, e.se, e.adjusted, e.adjusted_se
        );
        assert!((e.mean - p).abs() <= Z * e.se, "{what}");
        let tolerance = Z * e.adjusted_se + shared_step_allowance(p, steady);
        assert!((e.adjusted - p).abs() <= tolerance, "{what}: tolerance {tolerance:.5}");
        let w = row(&without, strategy)["overhead_frac"].as_f64().unwrap();
        assert!((e.adjusted - w).abs() > tolerance, "{what}: the projection without detection and rebuilds ({w:.4}) passes too");
        eprintln!("{what}: tolerance {tolerance:.5}; without detection and rebuilds {w:.4}");
    }
    assert_break_even_agrees(dir.path());
}

/// `resilab project --json` for `configs/recovery.toml` with `extra` flags: its rows.
fn job_rows(extra: &[&str]) -> Vec<Value> {
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/recovery.toml");
    let mut args = vec!["project", "--config", cfg.to_str().unwrap(), "--workers", "1024", "--json"];
    args.extend(extra);
    let o = run(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect()
}

#[test]
fn a_job_is_described_by_its_nodes_step_failure_rate_and_profile() {
    let base = ["--profile", "megascale-optimised", "--gpus-per-node", "8", "--step-s", "1.0"];
    // Llama 3's 3.8 failures per 1,000 node-days is a node MTBF of 1000 / 3.8 days.
    let years = format!("{}", 1000.0 / 3.8 / 365.25);
    let a = job_rows(&[&base[..], &["--failures-per-1000-node-days", "3.8"]].concat());
    let b = job_rows(&[&base[..], &["--node-mtbf-years", &years]].concat());
    assert_eq!(a, b);
    let preamble = &a[0];
    assert!(preamble["assumptions"][0].as_str().unwrap().contains("cost profile megascale-optimised"), "{preamble}");
    assert_eq!(preamble["warnings"].as_array().unwrap().len(), 0, "{preamble}");
    let row = |s: &str| a.iter().find(|r| r["strategy"] == s).unwrap();
    let cr = row("checkpoint_restart");
    // 128 nodes of 8, each failing every 1000 / 3.8 days.
    let mtbf = 1000.0 / 3.8 * 86_400.0 / 128.0;
    assert!((cr["system_mtbf_s"].as_f64().unwrap() - mtbf).abs() < 1e-6 * mtbf, "{cr}");
    assert_eq!((cr["step_s"].as_f64().unwrap(), cr["nodes"].as_u64().unwrap()), (1.0, 128));
    // MegaScale's 15 minutes cover the read and the recomputation: D + R alone.
    assert_eq!(cr["per_failure_s"].as_f64().unwrap(), 600.0 + 900.0);
    let (lo, mean, hi) =
        (cr["overhead_lo_frac"].as_f64().unwrap(), cr["overhead_frac"].as_f64().unwrap(), cr["overhead_hi_frac"].as_f64().unwrap());
    assert!(lo < mean && mean < hi, "{cr}");
    // Overriding one constant of the profile is said, and moves only that constant.
    let c = job_rows(&[&base[..], &["--set", "recovery.relaunch_s=1200"]].concat());
    assert!(c[0]["assumptions"].to_string().contains("recovery.relaunch_s = 1200 s overrides the profile's 900 s"), "{}", c[0]);
    let cr2 = c.iter().find(|r| r["strategy"] == "checkpoint_restart").unwrap();
    assert_eq!(cr2["per_failure_s"].as_f64().unwrap(), 600.0 + 1200.0);
}

#[test]
fn an_unknown_profile_names_the_known_ones() {
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/recovery.toml");
    let o = run(&["project", "--config", cfg.to_str().unwrap(), "--profile", "megascale"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--profile megascale: no such cost profile (known: megascale-optimised, megascale-unoptimised)"), "{e}");
}

/// The rebuild at which `resilab project` puts the turn from lossy forward to
/// checkpoint-restart for `workers` on the run configuration `cfg`, with `extra` flags.
fn projected_turn(cfg: &Path, workers: &str, extra: &[&str]) -> f64 {
    let mut args = vec!["project", "--config", cfg.to_str().unwrap(), "--workers", workers, "--json", "--no-study"];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let turn = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|v| v["key"] == "recovery.rebuild_s").unwrap();
    let stretches = turn["stretches"].as_array().unwrap();
    stretches
        .windows(2)
        .find(|w| w[0]["cheapest"] == "lossy_forward" && w[1]["cheapest"] == "checkpoint_restart")
        .map(|w| w[0]["to"].as_f64().unwrap())
        .unwrap_or_else(|| panic!("no turn from lossy forward to checkpoint-restart: {turn}"))
}

/// The committed recovery study's break-evens (`break_even.csv`: the rebuild at which
/// checkpoint-restart and lossy forward cost the same, read from its 1,080 runs' events) against
/// `resilab project` for the same job: each condition's run configuration, its workers and job
/// MTBF, the study's cost profile, and the study's step in the profile's seconds (its golden
/// runs' simulated step over `recovery.profile_scale`). Within 10% wherever the runs cross.
#[test]
fn the_committed_studys_break_evens_are_projects() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper/recovery");
    let campaign = resilab_campaign::Campaign::stored(&dir).unwrap();
    let runs = common::csv_records(&dir.join("runs.csv"));
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for row in common::csv_records(&dir.join("break_even.csv")) {
        let pair = (row["key"].as_str(), row["a"].as_str(), row["b"].as_str());
        if pair != ("recovery.rebuild_s", "checkpoint_restart", "lossy_forward") || row["break_even_s"].is_empty() {
            continue;
        }
        let from_runs: f64 = row["break_even_s"].parse().unwrap();
        let condition = &row["condition"];
        let of =
            |r: &std::collections::BTreeMap<String, String>| format!("fault={}, parallel.workers={}", r["fault"], r["parallel.workers"]);
        let run_row = runs.iter().find(|r| &of(r) == condition && r["recovery.strategy"] == "lossy_forward").unwrap();
        let mut cfg = campaign.run(run_row["index"].parse().unwrap()).unwrap().config;
        // A campaign's fault seed is a 64-bit hash, past what a TOML integer holds; the
        // projection draws no fault.
        cfg.fault_seed = 0;
        let mtbf = cfg.faults.entries().iter().find_map(|e| e.system_mtbf_steps).unwrap();
        let scale = cfg.recovery.profile_scale.unwrap();
        let step_s = run_row["golden_sim_s"].parse::<f64>().unwrap() / cfg.train.steps.unwrap() as f64 / scale;
        let path = write(tmp.path(), "run.toml", &cfg.to_toml());
        let workers = run_row["parallel.workers"].clone();
        let flags = ["--step-s", &step_s.to_string(), "--system-mtbf-steps", &mtbf.to_string(), "--profile", "megascale-optimised"];
        let projected = projected_turn(&path, &workers, &flags) * scale;
        let what = format!("{condition}: break-even rebuild {from_runs:.5} s from the runs, {projected:.5} s projected");
        assert!((from_runs - projected).abs() <= 0.1 * projected, "{what}");
        eprintln!("{what}");
        checked += 1;
    }
    assert!(checked >= 6, "{checked} conditions cross");
}
