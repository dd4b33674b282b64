//! `resilab campaign`, `merge` and `report` on tiny grids: a campaign killed with SIGKILL and
//! resumed loses and duplicates no run and ends with the same table as an uninterrupted one;
//! shards merge into the same table; runs that panic, hang, abort their process or meet a
//! structurally corrupt checkpoint are recorded as such while the campaign goes on.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{NEV, assert_clean_error, resilab, rows, run, table, write};

fn campaign(cfg: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args =
        vec!["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--jobs", "2", "--threads", "1", "--quiet"];
    args.extend_from_slice(extra);
    run(&args)
}

/// Writes `text` as `<name>.toml` in `dir`, runs it into `dir/<name>` and checks it succeeded;
/// returns the campaign directory.
fn finished(dir: &Path, name: &str, text: &str) -> PathBuf {
    let cfg = write(dir, &format!("{name}.toml"), text);
    let out = dir.join(name);
    let o = campaign(&cfg, &out, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// Runs `resilab report` on a campaign directory and checks it succeeded.
fn report(out: &Path) {
    let o = run(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `cells.csv` without the timing column.
fn cells(dir: &Path) -> Vec<Vec<String>> {
    let out = dir.join("report");
    let r = run(&["report", dir.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let mut rd = csv::Reader::from_path(out.join("cells.csv")).unwrap();
    let h = rd.headers().unwrap().clone();
    let skip = h.iter().position(|c| c == "time_overhead_pct").unwrap();
    rd.records().map(|r| r.unwrap().iter().enumerate().filter(|(i, _)| *i != skip).map(|(_, v)| v.to_string()).collect()).collect()
}

#[test]
fn killed_campaign_resumes_without_losing_or_duplicating_runs_and_shards_merge() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "nev.toml", NEV);
    let full = tmp.path().join("full");
    let o = campaign(&cfg, &full, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("(1 base run(s) first: "), "the summary times the base run: {stdout}");
    let reference = table(&full);
    assert_eq!(reference.len(), 20);
    assert!(rows(&full).iter().all(|r| r["status"] == "ok"), "{:?}", rows(&full));
    // The published trend on even this tiny grid: 30 flips in bits 0-8 give more N-EV than one.
    let nev = |flips: &str| rows(&full).iter().filter(|r| r["coords"]["inject.injection_tries"] == flips && r["nev"] == true).count();
    assert!(nev("30") > nev("1"), "N-EV with 30 flips {} vs 1 flip {}", nev("30"), nev("1"));

    killed_campaign_resumes(tmp.path(), &cfg, &full, &reference);
    let (s0, s1) = shards_merge(tmp.path(), &cfg, &full, &reference);
    merge_names_mixed_platforms(tmp.path(), &s0, &s1);
    restart_runs_report_their_losses(&full);
}

/// A campaign killed with SIGKILL after a few runs resumes to the uninterrupted one's table
/// (`full`'s, `reference`); without `--resume`, or with another grid, the directory is refused.
fn killed_campaign_resumes(dir: &Path, cfg: &Path, full: &Path, reference: &BTreeMap<String, String>) {
    // Kill after a few runs are recorded, then resume.
    let killed = dir.join("killed");
    let mut child = resilab()
        .args([
            "campaign",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            killed.to_str().unwrap(),
            "--jobs",
            "2",
            "--threads",
            "1",
            "--quiet",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let recorded = |d: &Path| std::fs::read_to_string(d.join("runs.jsonl")).map_or(0, |t| t.lines().count());
    while recorded(&killed) < 3 {
        assert!(start.elapsed() < Duration::from_secs(300), "the campaign recorded no runs in 300 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let at_kill = recorded(&killed);
    assert!(at_kill < 20, "the campaign finished before it could be killed; make it longer");
    // Without --resume the directory is refused; with it, the campaign completes.
    let o = campaign(cfg, &killed, &[]);
    assert_clean_error(&o, &["already holds a campaign", "--resume"]);
    let o = campaign(cfg, &killed, &["--resume"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("recorded before") && stdout.contains("(0 base run(s) first: "), "the base is reused: {stdout}");
    assert_eq!(&table(&killed), reference, "resumed campaign differs from the uninterrupted one (killed after {at_kill} runs)");
    let csv_rows = csv::Reader::from_path(killed.join("runs.csv")).unwrap().records().count();
    assert_eq!(csv_rows, 20);
    assert_eq!(cells(&killed), cells(full));

    // A different grid in the same directory is refused.
    let o = campaign(cfg, &killed, &["--resume", "--set", "campaign.repetitions=11"]);
    assert_clean_error(&o, &["different campaign"]);
}

/// Two shards of the campaign merge into the uninterrupted one's table; returns their directories.
fn shards_merge(dir: &Path, cfg: &Path, full: &Path, reference: &BTreeMap<String, String>) -> (PathBuf, PathBuf) {
    // Two shards merged give the same table.
    let (s0, s1) = (dir.join("s0"), dir.join("s1"));
    for (d, s) in [(&s0, "0/2"), (&s1, "1/2")] {
        let o = campaign(cfg, d, &["--shard", s]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(table(d).len(), 10);
    }
    let merged = dir.join("merged");
    let o = run(&["merge", "--out", merged.to_str().unwrap(), s0.to_str().unwrap(), s1.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(&table(&merged), reference);
    assert_eq!(cells(&merged), cells(full));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("platforms"), "one platform");
    (s0, s1)
}

/// Every row names its golden key (the base and the platform's bits); merging a shard from a
/// node with another CPU says so and counts the runs at risk.
fn merge_names_mixed_platforms(dir: &Path, s0: &Path, s1: &Path) {
    // Every row names its golden key: the base and the platform's bits (CPU model, ISA level).
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(s0.join("campaign.json")).unwrap()).unwrap();
    let platform = meta["platform"].as_str().unwrap().to_string();
    assert!(platform.starts_with("native / cpu") && (platform.contains("x86-64") || platform.contains("aarch64")), "{platform}");
    assert!(rows(s0).iter().all(|r| r["golden_key"].as_str().unwrap().contains('@')));
    // A shard from a node with another CPU: merge says so and counts the runs at risk.
    let other = |f: &str| std::fs::read_to_string(s1.join(f)).unwrap().replace(&platform, "native / cpu / Other CPU / x86-64-v4");
    std::fs::write(s1.join("campaign.json"), other("campaign.json")).unwrap();
    let jsonl: Vec<String> = std::fs::read_to_string(s1.join("runs.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let k = v["golden_key"].as_str().unwrap().split('@').next().unwrap().to_string();
            v["golden_key"] = format!("{k}@0000000000000000").into();
            v.to_string()
        })
        .collect();
    std::fs::write(s1.join("runs.jsonl"), jsonl.join("\n") + "\n").unwrap();
    let o = run(&["merge", "--out", dir.join("mixed").to_str().unwrap(), s0.to_str().unwrap(), s1.to_str().unwrap()]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("2 platforms") && err.contains("Other CPU") && err.contains("20 runs share a base configuration"), "{err}");
}

/// The full campaign's report: N-EV against the flips, its plots, and its restart runs compared
/// on the accuracy loss they caused, with what each comparison could detect and `--power`.
fn restart_runs_report_their_losses(full: &Path) {
    let report = std::fs::read_to_string(full.join("report/report.md")).unwrap();
    assert!(report.contains("N-EV") && report.contains("injection_tries"), "{report}");
    for f in ["nev_vs_flips.png", "nev_vs_flips.svg"] {
        assert!(std::fs::metadata(full.join("report/plots").join(f)).unwrap().len() > 1000, "{f}");
    }
    // Restart runs have golden runs: the flips are compared on the accuracy loss they caused,
    // never on raw accuracy, and each comparison says what its runs could detect.
    let mut rd = csv::Reader::from_path(full.join("report/comparisons.csv")).unwrap();
    let h = rd.headers().unwrap().clone();
    let (metric, detectable) = (h.iter().position(|c| c == "metric").unwrap(), h.iter().position(|c| c == "detectable").unwrap());
    let recs: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
    let metrics: std::collections::BTreeSet<&str> = recs.iter().map(|r| r.get(metric).unwrap()).collect();
    assert!(metrics.contains("acc_loss_all_pts") && !metrics.contains("acc_pct") && !metrics.contains("acc_all_pct"), "{metrics:?}");
    assert!(recs.iter().all(|r| r[detectable].parse::<f64>().unwrap() >= 0.0));
    let md = std::fs::read_to_string(full.join("report/report.md")).unwrap();
    let differences = md.split("## Differences").nth(1).unwrap();
    assert!(differences.trim_start().starts_with("Rules:") && differences.contains("detectable at 80% power"), "{differences}");
    // --power D: the runs per cell each comparison needs to detect D, and nothing written.
    let o = run(&["report", full.to_str().unwrap(), "--power", "10"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.lines().filter(|l| l.starts_with("| inject.injection_tries: 1 vs 30")).count(), recs.len(), "{text}");
    let o = run(&["report", full.to_str().unwrap(), "--power", "0"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--power 0: expected a positive difference"));
}

#[test]
fn campaign_survives_panics_hangs_aborts_and_corrupt_files() {
    let tmp = tempfile::tempdir().unwrap();
    let text = NEV.replace("repetitions = 10", "repetitions = 1").replace(
        "[grid]\n\"inject.injection_tries\" = [1, 30]",
        "injection_tries = 1\n\n[grid]\nself_test = [\"none\", \"panic\", \"hang\", \"abort\"]",
    );
    let cfg = write(tmp.path(), "chaos.toml", &text);
    let out = tmp.path().join("chaos");
    let start = Instant::now();
    let o = campaign(&cfg, &out, &["--timeout", "8"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(start.elapsed() < Duration::from_secs(120));
    let by: BTreeMap<String, serde_json::Value> =
        rows(&out).into_iter().map(|r| (r["coords"]["self_test"].as_str().unwrap().to_string(), r)).collect();
    assert_eq!(by.len(), 4);
    assert_eq!(by["none"]["status"], "ok");
    assert_eq!(by["panic"]["status"], "panicked");
    assert!(by["panic"]["message"].as_str().unwrap().contains("self_test = panic"));
    assert_eq!(by["hang"]["status"], "timeout");
    assert_eq!(by["abort"]["status"], "crashed");
    assert!(by["abort"]["message"].as_str().unwrap().contains("signal 6"), "{}", by["abort"]["message"]);

    // Byte flips in the HDF5 metadata: the probe refuses the file, the run is recorded as
    // corrupt_file, the campaign goes on.
    let text = NEV
        .replace("repetitions = 10", "repetitions = 3")
        .replace(
            "float_precision = 32\nfirst_bit = 0\nlast_bit = 8\nlocations_to_corrupt = [\"model\", \"optimizer\"]",
            "target = \"bytes\"\nbyte_region = \"metadata\"\nuse_random_locations = true\ninjection_tries = 400",
        )
        .replace("\"inject.injection_tries\" = [1, 30]", "workers_hit = [1]");
    let out = finished(tmp.path(), "corrupt", &text);
    let rs = rows(&out);
    assert_eq!(rs.len(), 3);
    assert!(rs.iter().all(|r| r["status"] == "corrupt_file"), "{rs:?}");
    report(&out);
    let md = std::fs::read_to_string(out.join("report/report.md")).unwrap();
    assert!(md.contains("3 corrupt_file"), "{md}");
}

#[test]
fn dry_run_counts_and_estimates_and_bad_input_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "nev.toml", NEV);
    let out = tmp.path().join("dry");
    let o = campaign(&cfg, &out, &["--dry-run", "--set", "campaign.repetitions=250"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("500 runs in the grid") && s.contains("ms per training step") && s.contains("estimate"), "{s}");
    assert!(!out.join("runs.jsonl").exists());
    let o = campaign(&cfg, &out, &["--dry-run", "--shard", "1/4"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("this shard   5 runs"), "{}", String::from_utf8_lossy(&o.stdout));

    let cores = std::thread::available_parallelism().unwrap().get();
    let o = run(&["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--jobs", &(cores + 1).to_string()]);
    assert_clean_error(&o, &["oversubscribe"]);
    let o = campaign(&cfg, &out, &["--shard", "2/2"]);
    assert_clean_error(&o, &["--shard 2/2"]);
    let bad = write(tmp.path(), "bad.toml", &NEV.replace("[1, 30]", "[1, 30]\n\"model.arch\" = [\"resnet\", \"lenet\"]"));
    let o = campaign(&bad, &out, &[]);
    assert_clean_error(&o, &["bad.toml", "model.arch = lenet"]);
    let bad = write(tmp.path(), "bad2.toml", &NEV.replace("last_bit = 8", "last_bit = 40"));
    let o = campaign(&bad, &out, &[]);
    assert_clean_error(&o, &["[inject]", "last_bit"]);
    // Nothing refused, and no dry run, wrote anything: the output directory was never made.
    assert!(
        !out.exists(),
        "refused campaigns left {:?}",
        std::fs::read_dir(&out).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );
}

/// An `eval` campaign (per-bit study) and a `train` campaign (recovery strategies) end to end:
/// the metrics each kind records and the plots each report draws.
#[test]
fn eval_and_train_campaigns_record_their_metrics_and_plots() {
    let tmp = tempfile::tempdir().unwrap();
    eval_campaign_records_each_bit(tmp.path());
    collapsed_runs_train_a_fixed_length(tmp.path());
    train_campaign_compares_strategies(tmp.path());
    // Every file of the three campaigns and their reports (runs.csv, cells.csv, comparisons.csv,
    // bits.csv, each run's metrics.csv and summary.json) names its units as docs/metrics.md says.
    let units = common::units::table();
    assert!(common::units::check_dir(tmp.path(), &units) > 10);
}

/// An `eval` campaign of single flips: one value and one bit within the word per run, no
/// training; its report's per-bit plots and tests.
fn eval_campaign_records_each_bit(dir: &Path) {
    let bits = NEV
        .replace("kind = \"restart\"", "kind = \"eval\"")
        .replace("repetitions = 10", "repetitions = 16")
        .replace("steps = 2\n", "")
        .replace("float_precision = 32\nfirst_bit = 0\nlast_bit = 8\nlocations_to_corrupt = [\"model\", \"optimizer\"]", "injection_tries = 1\nlocations_to_corrupt = [\"model\"]")
        .replace("\"inject.injection_tries\" = [1, 30]", "[grid.inject]\nf16 = { float_precision = 16, first_bit = 0, last_bit = 15 }\nf32 = { float_precision = 32, first_bit = 0, last_bit = 31 }");
    let out = finished(dir, "bits", &bits);
    let rs = rows(&out);
    assert_eq!(rs.len(), 32);
    for r in &rs {
        assert_eq!(r["status"], "ok", "{r}");
        // One value, one bit, within the precision's word; no training.
        assert_eq!(r["values_corrupted"], 1, "{r}");
        let bit: u64 = r["bits"].as_str().unwrap().parse().unwrap();
        let width = if r["coords"]["inject"] == "f16" { 16 } else { 32 };
        assert!(bit < width, "{r}");
        assert!(r["steps"].is_null() && r["final_acc_frac"].is_number(), "{r}");
    }
    report(&out);
    for f in ["bits_nev", "bits_nan", "bits_acc_loss", "layers_nev"] {
        assert!(out.join("report/plots").join(format!("{f}.png")).exists(), "{f}");
    }
    // Per bit, the N-EV share with its interval and a test against the other bits.
    let mut rd = csv::Reader::from_path(out.join("report/bits.csv")).unwrap();
    assert!(rd.headers().unwrap().iter().any(|h| h == "p_holm"));
    assert!(rd.records().count() >= 4);
}

/// With `stop_at_collapse = false`, collapsed runs train all their steps too.
fn collapsed_runs_train_a_fixed_length(dir: &Path) {
    let fixed = NEV
        .replace("repetitions = 10", "repetitions = 3")
        .replace("[1, 30]", "[30]")
        .replace("timeout_s = 120", "timeout_s = 120\nstop_at_collapse = false");
    let out = finished(dir, "fixed", &fixed);
    let rs = rows(&out);
    assert!(rs.iter().all(|r| r["steps"] == 2), "{rs:?}");
    assert!(rs.iter().any(|r| r["collapsed"] == true), "{rs:?}");
}

/// A `train` campaign over two strategies: rollback ends as the golden run, restart loses steps;
/// the report's plots.
fn train_campaign_compares_strategies(dir: &Path) {
    let train = r#"
[campaign]
kind = "train"
seeds = [3]
repetitions = 1
timeout_s = 120

[base]
fault_seed = 5
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 16, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 8, batch_size = 32, eval_every = 4 }
parallel = { workers = 2 }
checkpoint = { every_steps = 3 }

[[base.fault]]
target = "weights"
at_step = 5
worker = 1
injection_tries = 1
first_bit = 1
last_bit = 1
allow_sign_change = false
locations_to_corrupt = ["model/stem/bn/weight"]

[grid]
"recovery.strategy" = ["checkpoint_restart", "rollback"]
"#;
    let out = finished(dir, "train", train);
    let by: BTreeMap<String, serde_json::Value> =
        rows(&out).into_iter().map(|r| (r["coords"]["recovery.strategy"].as_str().unwrap().to_string(), r)).collect();
    assert_eq!(by.len(), 2);
    for r in by.values() {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["faults"], 1, "{r}");
        assert!(r["detections"].as_u64().unwrap() >= 1, "{r}");
    }
    // Rollback redoes the step and ends as the golden run; restart loses the step since the
    // checkpoint at step 3.
    assert_eq!(by["rollback"]["acc_loss_frac"], 0.0, "{}", by["rollback"]);
    assert_eq!(by["rollback"]["steps_lost"], 0, "{}", by["rollback"]);
    assert!(by["checkpoint_restart"]["steps_lost"].as_u64().unwrap() >= 1, "{}", by["checkpoint_restart"]);
    report(&out);
    for f in ["acc_vs_step", "loss_vs_overhead"] {
        assert!(out.join("report/plots").join(format!("{f}.png")).exists(), "{f}");
    }
    let md = std::fs::read_to_string(out.join("report/report.md")).unwrap();
    assert!(md.contains("recovery.strategy") && md.contains("rollback"), "{md}");
}

#[test]
fn n_ev_is_decided_by_the_outcome_and_the_injected_extremes_are_a_column_of_their_own() {
    let tmp = tempfile::tempdir().unwrap();
    // One BatchNorm running variance scaled by 1e11: an extreme value in the checkpoint, which
    // training-mode batch norm never reads and its running average decays by 0.9 per step, so
    // 40 steps wash it out (1e11 x 0.9^40 < 1e10 for a variance below 6).
    let washed = NEV
        .replace("repetitions = 10", "repetitions = 3")
        .replace("steps = 2\n", "steps = 40\n")
        .replace(
            "first_bit = 0\nlast_bit = 8\nlocations_to_corrupt = [\"model\", \"optimizer\"]",
            "scaling_factor = 1e11\nlocations_to_corrupt = [\"model/layer1/0/bn1/running_var\"]",
        )
        .replace("\"inject.injection_tries\" = [1, 30]", "\"inject.injection_tries\" = [1]");
    let out = finished(tmp.path(), "washed", &washed);
    let rs = rows(&out);
    assert_eq!(rs.len(), 3);
    for r in &rs {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["ev_injected"], true, "the altered checkpoint holds an extreme value: {r}");
        assert_eq!(r["nev"], false, "training washed it out: {r}");
        assert_eq!(r["collapsed"], false);
        assert_eq!(r["steps"], 40);
    }
    // 30 exponent flips in the weights: the state becomes NaN/Inf, which no step removes, so a
    // run stops at once with N-EV decided (stop_at_collapse), at the step where it happened.
    let nan = NEV
        .replace("repetitions = 10", "repetitions = 3")
        .replace("first_bit = 0\nlast_bit = 8", "first_bit = 1\nlast_bit = 1")
        .replace("[1, 30]", "[30]");
    let out = finished(tmp.path(), "nan", &nan);
    let rs = rows(&out);
    assert!(rs.iter().any(|r| r["collapse_step"].is_u64()), "30 exponent flips collapse some run: {rs:?}");
    for r in &rs {
        if r["collapse_step"].is_u64() {
            assert_eq!((&r["nev"], &r["collapsed"]), (&serde_json::json!(true), &serde_json::json!(true)), "{r}");
            assert_eq!(r["steps"], r["collapse_step"], "stopped where the state became NaN/Inf: {r}");
        }
    }
    let o = run(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let h = csv::Reader::from_path(out.join("report/cells.csv")).unwrap().headers().unwrap().clone();
    for c in ["nev_pct", "nev_lo", "nev_hi", "ev_injected_pct", "acc_all_pct", "seeds"] {
        assert!(h.iter().any(|x| x == c), "cells.csv has {c}: {h:?}");
    }
}

#[test]
fn data_parallel_runs_report_the_hit_replica_and_the_divergence_after_the_restart_broadcast() {
    let tmp = tempfile::tempdir().unwrap();
    // Momentum flips in one replica of 2. A restart broadcasts rank 0's parameters (the DDP
    // default), so the replicas keep their own momentum, one of them altered, and drift apart;
    // broadcasting the optimizer state too (what Horovod scripts do) leaves nothing to drift.
    let dp = NEV
        .replace("repetitions = 10", "repetitions = 2")
        .replace("train = { batch_size = 32 }", "train = { batch_size = 32 }\nparallel = { workers = 2 }")
        .replace("first_bit = 0\nlast_bit = 8\nlocations_to_corrupt = [\"model\", \"optimizer\"]", "first_bit = 2\nlast_bit = 5\nlocations_to_corrupt = [\"optimizer\"]")
        .replace("\"inject.injection_tries\" = [1, 30]", "\"inject.injection_tries\" = [20]\nworkers_hit = [1]\n\"parallel.broadcast_on_restart\" = [\"parameters\", \"parameters_and_optimizer\"]");
    let out = finished(tmp.path(), "dp", &dp);
    let rs = rows(&out);
    assert_eq!(rs.len(), 4);
    for r in &rs {
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["hit_acc_frac"].is_f64() && r["final_acc_frac"].is_f64(), "rank 0's and the hit replica's accuracy: {r}");
        let diverged = r["replicas_diverged"].as_u64().unwrap();
        match r["coords"]["parallel.broadcast_on_restart"].as_str().unwrap() {
            "parameters" => assert_eq!(diverged, 1, "the replicas' own momenta move them apart: {r}"),
            _ => {
                assert_eq!(diverged, 0, "{r}");
                assert_eq!(r["hit_acc_frac"], r["final_acc_frac"]);
            }
        }
    }
}

#[test]
fn the_injected_extreme_is_read_from_the_files_before_the_restart_broadcast_and_the_evidence_decides_n_ev() {
    let tmp = tempfile::tempdir().unwrap();
    // One running variance scaled by 1e11 in one replica of 2. A DDP restart broadcasts rank
    // 0's parameters and buffers: an extreme value in rank 1's file is erased before training,
    // one in rank 0's is copied everywhere and stays after 2 steps (1e11 x 0.9^2 > 1e10). Read
    // after the broadcast, rank 1's runs would show no injected extreme at all.
    let dp = NEV
        .replace("repetitions = 10", "repetitions = 6")
        .replace("train = { batch_size = 32 }", "train = { batch_size = 32 }\nparallel = { workers = 2 }")
        .replace(
            "first_bit = 0\nlast_bit = 8\nlocations_to_corrupt = [\"model\", \"optimizer\"]",
            "scaling_factor = 1e11\nlocations_to_corrupt = [\"model/layer1/0/bn1/running_var\"]",
        )
        .replace("\"inject.injection_tries\" = [1, 30]", "\"inject.injection_tries\" = [1]\nworkers_hit = [1]");
    let out = finished(tmp.path(), "dp", &dp);
    let rs = rows(&out);
    let ranks: HashSet<&str> = rs.iter().map(|r| r["ranks_hit"].as_str().unwrap()).collect();
    assert_eq!(ranks, HashSet::from(["0", "1"]), "both ranks hit in 6 runs: {rs:?}");
    for r in &rs {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["ev_injected"], true, "the file held the extreme value: {r}");
        assert_eq!(r["extreme_threshold"], 1e10);
        assert_eq!((r["base_step"].as_u64(), r["restart_step"].as_u64()), (Some(3), Some(3)), "{r}");
        let buffer = r["buffer_max_abs"].as_f64().unwrap();
        if r["ranks_hit"] == "0" {
            assert!(buffer > 1e10, "rank 0's extreme value reached every replica: {r}");
            assert!(r["peak_abs"].as_f64().unwrap() > 1e10, "{r}");
            assert_eq!(r["nev"], true, "{r}");
        } else {
            assert!(buffer < 1e10, "the broadcast erased rank 1's: {r}");
            assert_eq!(r["nev"], false, "{r}");
            assert_eq!(r["replicas_diverged"], 0, "{r}");
        }
        assert_eq!(r["buffer_non_finite"], 0);
        assert!(r["final_train_loss"].is_f64(), "{r}");
    }
    // The report decides N-EV from those columns and says it agrees with what was injected
    // only where training did not remove it.
    let o = run(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut rd = csv::Reader::from_path(out.join("report/cells.csv")).unwrap();
    let h = rd.headers().unwrap().clone();
    let cell = rd.records().next().unwrap().unwrap();
    let col = |name: &str| cell[h.iter().position(|c| c == name).unwrap()].to_string();
    let nev_runs = rs.iter().filter(|r| r["nev"] == true).count();
    assert_eq!(col("nev"), nev_runs.to_string());
    assert_eq!(col("ev_injected"), "6");
    assert!(!col("nev_vs_ev_p").is_empty() && !col("rwc_all").is_empty(), "{cell:?}");
}

#[test]
fn status_and_merge_check_the_shards_and_a_log_gets_one_line_per_run() {
    let tmp = tempfile::tempdir().unwrap();
    let text = NEV.replace("repetitions = 10", "repetitions = 2");
    let cfg = write(tmp.path(), "nev.toml", &text);
    let shard = |i: usize| tmp.path().join(format!("nev-shard-{i}"));
    // Shard 0 in full, without --quiet: its standard error is a file, so one line per run.
    let args = ["campaign", "--config", cfg.to_str().unwrap(), "--jobs", "1", "--threads", "1", "--shard", "0/2", "--out"];
    let o = run(&[&args[..], &[shard(0).to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("] run ")).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].contains("[1/2] run ") && lines[0].contains("(grid index 0): ok"), "{err}");
    assert!(!err.contains('\r') && !err.contains("eta"), "no progress bar into a file: {err}");
    // Shard 1 started, nothing recorded yet: status and merge say what is missing.
    std::fs::create_dir_all(shard(1)).unwrap();
    for f in ["campaign.toml", "campaign.json"] {
        let t = std::fs::read_to_string(shard(0).join(f)).unwrap();
        std::fs::write(shard(1).join(f), t.replace("\"shard\": \"0/2\"", "\"shard\": \"1/2\"")).unwrap();
    }
    std::fs::write(shard(1).join("runs.jsonl"), "").unwrap();
    let dirs = [shard(0).to_str().unwrap().to_string(), shard(1).to_str().unwrap().to_string()];
    let o = run(&["campaign", "--status", tmp.path().to_str().unwrap()]);
    assert_clean_error(&o, &["not a campaign directory (it has no campaign.toml)"]);
    let o = run(&["campaign", "--status", &dirs[0], &dirs[1]]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("shard 0/2: 2 of 2 recorded (2 ok), complete"), "{out}");
    assert!(out.contains("shard 1/2: 0 of 2 recorded (none), 2 missing"), "{out}");
    assert!(out.contains("all: 2 of 4 runs recorded (0 not ok), 2 missing (grid index 1, 3)"), "{out}");
    let merged = tmp.path().join("merged");
    let o = run(&["merge", "--out", merged.to_str().unwrap(), &dirs[0], &dirs[1]]);
    assert_clean_error(&o, &["2 of the grid's 4 runs are recorded by no part", "--partial"]);
    assert!(!merged.join("runs.csv").exists());
    let o = run(&["merge", "--partial", "--out", merged.to_str().unwrap(), &dirs[0], &dirs[1]]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stderr).contains("without 2 run(s)"));
    // Resuming a shard directory as another shard is refused; as itself, it completes.
    let o = campaign(&cfg, &shard(1), &["--resume", "--shard", "0/2"]);
    assert_clean_error(&o, &["holds shard 1/2 of its campaign, not 0/2", "RESILAB_SHARDS"]);
    let o = campaign(&cfg, &shard(1), &["--resume", "--shard", "1/2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let full = tmp.path().join("full");
    let o = run(&["merge", "--out", full.to_str().unwrap(), &dirs[0], &dirs[1]]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(rows(&full).len(), 4);
    // Parts that overlap with different results are refused: the same run id, another result.
    let mut forged = std::fs::read_to_string(shard(0).join("runs.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(forged.lines().next().unwrap()).unwrap();
    let mut other = first.clone();
    other["final_acc_frac"] = serde_json::json!(0.123);
    forged = format!("{other}\n");
    std::fs::write(shard(1).join("runs.jsonl"), std::fs::read_to_string(shard(1).join("runs.jsonl")).unwrap() + &forged).unwrap();
    let o = run(&["merge", "--out", tmp.path().join("overlap").to_str().unwrap(), &dirs[0], &dirs[1]]);
    assert_clean_error(&o, &["recorded by more than one part with different results", first["id"].as_str().unwrap()]);
}

/// Runs `resilab` with `args`, killing it after `limit`; returns its output and how long it ran.
fn run_within(args: &[&str], limit: Duration) -> (std::process::Output, Duration) {
    let start = Instant::now();
    let mut child = resilab().args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    while child.try_wait().unwrap().is_none() && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    (child.wait_with_output().unwrap(), start.elapsed())
}

#[test]
fn a_grid_is_counted_before_it_is_expanded_and_one_above_the_bound_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "nev.toml", NEV);
    let out = tmp.path().join("dry");
    let dry = ["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--dry-run", "--set"];
    let (o, took) = run_within(&[&dry[..], &["campaign.repetitions=1000000000"]].concat(), Duration::from_secs(60));
    assert!(took < Duration::from_secs(20), "{took:?}: the grid was expanded before it was counted");
    assert_clean_error(
        &o,
        &["nev.toml: the grid has 2000000000 runs (seeds 1 x repetitions 1000000000 x \"inject.injection_tries\" 2), more than 1000000: "],
    );
    // Axes whose product is past what 64 bits hold: counted, never wrapped.
    let axis = format!("grid.\"inject.first_bit\"=[{}]", vec!["0"; 400].join(", "));
    let (o, took) =
        run_within(&[&dry[..], &[&axis, "--set", "campaign.repetitions=9223372036854775807"]].concat(), Duration::from_secs(60));
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_clean_error(&o, &["runs (seeds 1 x repetitions 9223372036854775807 x \"inject.first_bit\" 400 x \"inject.injection_tries\" 2)"]);
    assert!(!out.exists());
}

/// A campaign directory written by hand for the 4-run grid of `text` (`NEV` with 2
/// repetitions): `campaign.toml` as `campaign` writes it, and `runs.jsonl` holding `lines`.
fn handmade(dir: &Path, name: &str, lines: &str) -> PathBuf {
    let cfg = write(dir, &format!("{name}.toml"), &NEV.replace("repetitions = 10", "repetitions = 2"));
    let c = resilab_campaign::Campaign::load(&cfg, &[]).unwrap();
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("campaign.toml"), &c.text).unwrap();
    std::fs::write(out.join("runs.jsonl"), lines).unwrap();
    out
}

/// Run `index` of `handmade`'s grid recorded as `ok` with final accuracy `acc`, as one line
/// (without its newline).
fn row(dir: &Path, index: u64, acc: f64) -> String {
    let c = resilab_campaign::Campaign::parse(&std::fs::read_to_string(dir.join("campaign.toml")).unwrap(), &[], "t").unwrap();
    let spec = c.run(index).unwrap();
    let metrics = resilab_campaign::Metrics {
        final_acc: Some(acc),
        golden_acc: Some(0.5),
        acc_loss: Some(0.5 - acc),
        nev: Some(false),
        ev_injected: Some(false),
        collapsed: Some(false),
        values_corrupted: Some(1),
        ..Default::default()
    };
    let r = resilab_campaign::Row {
        id: spec.id,
        index,
        coords: spec.coords.into_iter().collect(),
        seed: spec.seed,
        rep: spec.rep,
        status: resilab_campaign::Status::Ok,
        message: None,
        metrics,
    };
    serde_json::to_string(&r).unwrap()
}

#[test]
fn rows_are_checked_against_the_grid_and_runs_are_counted_per_grid_index() {
    let tmp = tempfile::tempdir().unwrap();
    let d = handmade(tmp.path(), "forged", "");
    let s = |d: &Path| d.to_str().unwrap().to_string();
    // A row whose grid index is outside the 4-run grid: refused by each reader, naming it.
    let mut outside: serde_json::Value = serde_json::from_str(&row(&d, 1, 0.4)).unwrap();
    outside["index"] = 1_000_000_000.into();
    std::fs::write(d.join("runs.jsonl"), format!("{}\n{}\n{outside}\n", row(&d, 0, 0.4), row(&d, 1, 0.4))).unwrap();
    let merged = tmp.path().join("merged");
    let named = format!("{} line 3: grid index 1000000000 is outside the grid, which has 4 runs", d.join("runs.jsonl").display());
    for args in [vec!["campaign", "--status", &s(&d)], vec!["merge", "--partial", "--out", &s(&merged), &s(&d)], vec!["report", &s(&d)]] {
        assert_clean_error(&run(&args), &[&named]);
    }
    assert!(!merged.exists() && !d.join("report").exists());
    // The same run twice is one run: 2 of 4 recorded, and the report says so.
    std::fs::write(d.join("runs.jsonl"), format!("{0}\n{1}\n{1}\n{0}\n", row(&d, 0, 0.4), row(&d, 1, 0.4))).unwrap();
    let o = run(&["campaign", "--status", &s(&d)]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("shard all: 2 of 4 recorded (2 ok), 2 missing"), "{text}");
    assert!(text.contains("all: 2 of 4 runs recorded (0 not ok), 2 missing (grid index 2, 3)"), "{text}");
    let o = run(&["report", &s(&d)]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("2 runs in "), "{o:?}");
    let md = std::fs::read_to_string(d.join("report/report.md")).unwrap();
    assert!(md.contains("2 runs recorded of 4 in the grid (2 ok; 2 not recorded)"), "{md}");
    // The same index with another result is refused.
    std::fs::write(d.join("runs.jsonl"), format!("{}\n{}\n", row(&d, 0, 0.4), row(&d, 0, 0.3))).unwrap();
    assert_clean_error(
        &run(&["campaign", "--status", &s(&d)]),
        &["line 2: grid index 0 is recorded again with another result (first on line 1)"],
    );

    // A last row without its newline that is whole counts; one cut short is said, and missing.
    std::fs::write(d.join("runs.jsonl"), format!("{}\n{}\n{}", row(&d, 0, 0.4), row(&d, 1, 0.4), row(&d, 2, 0.4))).unwrap();
    let o = run(&["campaign", "--status", &s(&d)]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("all: 3 of 4 runs recorded"), "{o:?}");
    let o = run(&["merge", "--partial", "--out", &s(&merged), &s(&d)]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("3 runs -> "), "{o:?}");
    std::fs::write(d.join("runs.jsonl"), format!("{}\n{}\n{{\"id\":\"4147bd\",\"ind", row(&d, 0, 0.4), row(&d, 1, 0.4))).unwrap();
    let o = run(&["campaign", "--status", &s(&d)]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && out.contains("all: 2 of 4 runs recorded (0 not ok), 2 missing (grid index 2, 3)"), "{out}{err}");
    assert!(err.contains(&format!("warning: {} line 3: the last line is cut short", d.join("runs.jsonl").display())), "{err}");
    assert!(err.contains("its run counts as missing"), "{err}");
}

#[test]
fn resume_keeps_a_whole_last_row_without_its_newline_and_reruns_only_the_missing_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let d = handmade(tmp.path(), "cut", "");
    let (first, second) = (row(&d, 0, 0.123), row(&d, 1, 0.456));
    std::fs::write(d.join("runs.jsonl"), format!("{first}\n{second}")).unwrap();
    let o = campaign(&tmp.path().join("cut.toml"), &d, &["--resume"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(d.join("runs.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[..2], [first.as_str(), second.as_str()], "the recorded rows are kept as they were");
    let indices: HashSet<u64> = rows(&d).iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert_eq!(indices, [0, 1, 2, 3].into());
}

#[test]
fn a_half_written_directory_is_no_campaign_and_every_error_names_its_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let d = handmade(tmp.path(), "c", "");
    let s = |d: &Path| d.to_str().unwrap().to_string();
    std::fs::write(d.join("runs.jsonl"), row(&d, 0, 0.4) + "\n").unwrap();
    // What a merge cut short used to leave: the campaign file, and its record under a
    // temporary name.
    let half = tmp.path().join("half");
    std::fs::create_dir(&half).unwrap();
    std::fs::copy(d.join("campaign.toml"), half.join("campaign.toml")).unwrap();
    std::fs::copy(d.join("runs.jsonl"), half.join("runs.tmp")).unwrap();
    assert_clean_error(
        &run(&["campaign", "--status", &s(&half)]),
        &["half: holds campaign.toml but no record of runs (runs.jsonl or runs.csv)"],
    );
    // An --out that is a file: said so, by report and merge alike.
    let file = d.join("runs.jsonl");
    let said = format!("--out {} is a file, not a directory", file.display());
    assert_clean_error(&run(&["report", &s(&d), "--out", &s(&file)]), &[&said]);
    assert_clean_error(&run(&["merge", "--partial", "--out", &s(&file), &s(&d)]), &[&said]);
    // A report replaces its directory whole: never one holding other files.
    assert_clean_error(&run(&["report", &s(&d), "--out", &s(&d)]), &["which a report does not write"]);
    // An I/O error says its cause, once.
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let o = run(&["campaign", "--status", &s(&d)]);
    assert_clean_error(&o, &[&format!("{}: Is a directory", file.display())]);
    assert_eq!(String::from_utf8_lossy(&o.stderr).matches("Is a directory").count(), 1, "{o:?}");
}
