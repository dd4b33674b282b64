//! `resilab report DIR --at-jobs FILE` (and `[[campaign.job]]`): a study's "which strategy when"
//! table priced at real jobs, held to its definition: the runs' cost per fault at the job's step
//! and failure rate.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{assert_clean_error, csv_records, finished_campaign, run, write};

/// Random crashes (one every 3 steps of the job) under three strategies, priced at one profile.
const CAMPAIGN: &str = r#"
[campaign]
kind = "train"
seeds = [3]
repetitions = 3
timeout_s = 300
# Every option admissible on 3 groups, so that the table states overheads to compare.
accuracy_budget_points = 50.0
catastrophe_budget_pct = 100.0
golden_min_pct = 0.0

[[campaign.hypothesis]]
name = "rollback costs less simulated time than checkpoint-restart"
metric = "sim_overhead"
a = "checkpoint_restart"
b = "rollback"

[base]
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 8, classes = 4, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 8, batch_size = 32, eval_every = 4 }
parallel = { workers = 2, bucket_mb = 0.004, compute = { gflops = 20.0 } }
checkpoint = { every_steps = 2 }
recovery = { profile = "megascale-optimised", profile_scale = SCALE }

[[base.fault]]
target = "crash"
system_mtbf_steps = 3

[grid]
"recovery.strategy" = ["checkpoint_restart", "rollback", "lossy_forward"]
"#;

const SCALE: f64 = 1e-6;

/// One node of 8 GPUs failing once every `every` steps of `step_s` seconds.
fn job(name: &str, step_s: f64, every: f64) -> String {
    let rate = 1_000.0 * 86_400.0 / (every * step_s);
    format!("[[job]]\nname = \"{name}\"\ngpus = 8\ngpus_per_node = 8\nstep_s = {step_s}\nfailures_per_1000_node_days = {rate}\n\n")
}

fn report(dir: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec!["report", dir.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Per (job, condition), the row of `which_strategy_jobs.csv`; `which_strategy.csv` under the
/// job name `""`.
fn choices(file: &Path) -> BTreeMap<(String, String), BTreeMap<String, String>> {
    csv_records(file).into_iter().map(|r| ((r.get("job").cloned().unwrap_or_default(), r["condition"].clone()), r)).collect()
}

fn overhead(r: &BTreeMap<String, String>) -> f64 {
    r["sim_overhead_pct"].parse().unwrap()
}

#[test]
fn a_job_prices_the_runs_cost_per_fault_at_its_step_and_failure_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = finished_campaign(tmp.path(), "c", &CAMPAIGN.replace("SCALE", &SCALE.to_string()), &[]);
    let runs = csv_records(&dir.join("runs.csv"));
    let golden: f64 = runs[0]["golden_sim_s"].parse().unwrap();
    // The run's own step, as the job's: the profile at the runs' own scale.
    let own_step = golden / 8.0 / SCALE;
    let jobs = format!("{}{}{}", job("own", own_step, 3.0), job("twice", own_step, 1.5), job("slow", 4.0 * own_step, 3.0));
    let file = write(tmp.path(), "jobs.toml", &jobs);
    let (plain, at_jobs, priced) = (tmp.path().join("plain"), tmp.path().join("jobs"), tmp.path().join("priced"));
    report(&dir, &plain, &[]);
    report(&dir, &at_jobs, &["--at-jobs", file.to_str().unwrap()]);
    let quarter = (SCALE / 4.0).to_string();
    report(&dir, &priced, &["--price", "megascale-optimised", "--price-scale", &quarter]);
    let study = choices(&plain.join("which_strategy.csv"));
    let repriced = choices(&priced.join("which_strategy.csv"));
    let at = choices(&at_jobs.join("which_strategy_jobs.csv"));
    assert_eq!(at.len(), 3 * study.len(), "{at:?}");
    let md = std::fs::read_to_string(at_jobs.join("report.md")).unwrap();
    assert!(md.contains("## Priced at real jobs") && md.contains("### Which strategy when: twice"), "{md}");
    assert!(md.contains("| condition | golden SD (points) | the runs' own prices | own | twice | slow |"), "{md}");
    for ((_, condition), s) in &study {
        let of = |name: &str| &at[&(name.to_string(), condition.clone())];
        // At the runs' own step and rate: the study's table.
        for column in ["choice", "decided", "chosen", "acc_loss_upper_pts"] {
            assert_eq!(of("own")[column], s[column], "{column}");
        }
        assert!((overhead(of("own")) - overhead(s)).abs() <= 1e-3, "{} vs {}", of("own")["sim_overhead_pct"], s["sim_overhead_pct"]);
        // Failing twice as often: every overhead doubles, the choice stays.
        assert_eq!(of("twice")["chosen"], s["chosen"]);
        assert!((overhead(of("twice")) - 2.0 * overhead(s)).abs() <= 2e-3, "{}", of("twice")["sim_overhead_pct"]);
        // A step 4x as long: each constant costs a quarter of the steps, as at a quarter scale.
        let r = &repriced[&(String::new(), condition.clone())];
        assert_eq!(of("slow")["chosen"], r["chosen"]);
        assert!((overhead(of("slow")) - overhead(r)).abs() <= 1e-3, "{} vs {}", of("slow")["sim_overhead_pct"], r["sim_overhead_pct"]);
        assert!(overhead(r) < overhead(s), "the quarter scale is cheaper");
    }
}

#[test]
fn a_bad_jobs_file_is_refused_naming_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = finished_campaign(tmp.path(), "c", &CAMPAIGN.replace("SCALE", &SCALE.to_string()), &[]);
    let out = tmp.path().join("r");
    let args = |file: &Path| run(&["report", dir.to_str().unwrap(), "--out", out.to_str().unwrap(), "--at-jobs", file.to_str().unwrap()]);
    let zero = write(tmp.path(), "zero.toml", &job("j", 1.0, 3.0).replace("gpus = 8\n", "gpus = 0\n"));
    assert_clean_error(&args(&zero), &["zero.toml", "job[0].gpus"]);
    let typo = write(tmp.path(), "typo.toml", &job("j", 1.0, 3.0).replace("step_s", "step_seconds"));
    assert_clean_error(&args(&typo), &["typo.toml", "step_seconds"]);
    assert!(!out.exists(), "nothing written");
    // A campaign without hypotheses has no table to price: refused before --out is made.
    let good = write(tmp.path(), "good.toml", &job("j", 1.0, 3.0));
    let nev = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper/nev");
    let o = run(&["report", nev.to_str().unwrap(), "--out", out.to_str().unwrap(), "--at-jobs", good.to_str().unwrap()]);
    assert_clean_error(&o, &["--at-jobs", "campaign.hypothesis"]);
    assert!(!out.exists(), "nothing written");
}
