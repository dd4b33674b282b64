//! Detectors scored from recorded signals through the CLI (docs/metrics.md, "Detectors,
//! scored"): a `train` campaign with `detect.record_signals` under every strategy, then
//! `report --detectors`, which makes every run's detections again from its `signals.csv` (a
//! tampered file fails it, naming the run) and sweeps each detector's settings.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::csv_records as read;
use common::finished_campaign;

/// Two workers, every detector on (a spike over 4 losses at 1.5x, digests every 2 steps), and
/// faults that set them off: weights whose exponent's top bits flip, gradients scaled by 1e20.
const CAMPAIGN: &str = r#"
[campaign]
kind = "train"
seeds = [3]
repetitions = 1
timeout_s = 300

[base]
data = { source = "synthetic", train_size = 256, test_size = 64, image_size = 8, classes = 4, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 24, batch_size = 32, log_every = 2, eval_every = 4 }
optimizer = { kind = "sgd", lr = 0.05, momentum = 0.9 }
parallel = { workers = 2 }
checkpoint = { every_steps = 8, keep_last = 2 }
detect = { record_signals = true, loss_spike = { window = 4, factor = 1.5 }, divergence_every = 2 }

[grid]
"recovery.strategy" = ["none", "rollback", "lossy_forward", "checkpoint_restart"]

[grid.fault]
"none" = []
"weights" = [{ target = "weights", at_step = 6, injection_tries = 4, first_bit = 1, last_bit = 2 }]
"gradients" = [{ target = "gradients", at_step = 9, scaling_factor = 1e20, injection_tries = 20 }]
"#;

fn report(campaign: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["report", campaign.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend(extra);
    common::run(&args)
}

/// `detectors.csv`'s lines of `detector`, in the sweep's order.
fn lines<'a>(rows: &'a [BTreeMap<String, String>], detector: &str) -> Vec<&'a BTreeMap<String, String>> {
    rows.iter().filter(|r| r["detector"] == detector).collect()
}

fn num(r: &BTreeMap<String, String>, key: &str) -> u64 {
    r[key].parse().unwrap_or_else(|_| panic!("{key} in {r:?}"))
}

#[test]
fn every_runs_detections_are_made_again_from_its_signals_and_every_detector_is_swept() {
    let dir = tempfile::tempdir().unwrap();
    let out = finished_campaign(dir.path(), "detectors", CAMPAIGN, &[]);
    let runs = read(&out.join("runs.csv"));
    assert_eq!(runs.len(), 12);
    // Every run and its golden run recorded their signals.
    let signals = |d: &Path| d.join("signals.csv").is_file();
    assert!(runs.iter().all(|r| signals(&out.join("runs").join(&r["id"]))));
    let golden: Vec<_> = std::fs::read_dir(out.join("golden")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    assert!(!golden.is_empty() && golden.iter().all(|g| signals(g)), "{golden:?}");

    let rep = dir.path().join("report");
    let o = report(&out, &rep, &["--detectors"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    let agree = md.lines().find(|l| l.contains("made again from their `signals.csv`")).unwrap();
    assert!(agree.starts_with(&format!("{} runs' detections", 12 + golden.len())), "{agree}");
    let detected: usize = runs.iter().map(|r| r["detections"].parse::<usize>().unwrap()).sum();
    assert!(detected > 0, "the faults set the detectors off");
    assert!(md.contains("## Detectors, scored from recorded signals") && md.contains("plots/detectors.png"), "{md}");
    assert!(rep.join("plots/detectors.png").is_file() && rep.join("plots/detectors.svg").is_file());

    let swept = read(&rep.join("detectors.csv"));
    assert_eq!(swept.len(), 3 * 8 + 7 + 6, "{swept:?}");
    // A higher threshold (a longer interval) fires on a subset of the steps: nothing it scores
    // can grow along the sweep.
    for d in ["nan_loss", "nan_gradients", "nan_weights", "replica_divergence"] {
        let l = lines(&swept, d);
        for w in l.windows(2) {
            for key in ["recall", "alarmed", "golden_alarm_steps", "harmless_alarm_steps"] {
                assert!(num(w[0], key) >= num(w[1], key), "{d} {key}: {:?} then {:?}", w[0], w[1]);
            }
        }
        assert!(l.iter().all(|r| num(r, "harmed") == num(l[0], "harmed") && num(r, "golden_steps") == num(l[0], "golden_steps")));
    }
    // The gradients scaled by 1e20 are caught at the run-time threshold (1e10), within a step.
    let at_1e10 = lines(&swept, "nan_gradients").into_iter().find(|r| r["setting"] == "magnitude > 1e10").unwrap();
    let latency: f64 = at_1e10["latency_median_steps"].parse().unwrap();
    assert!(num(at_1e10, "recall") > 0 && latency <= 1.0, "{at_1e10:?}");

    let chosen = read(&rep.join("detector_choice.csv"));
    let names: Vec<&str> = chosen.iter().map(|c| c["detector"].as_str()).collect();
    assert_eq!(names, ["loss_spike", "nan_gradients", "nan_loss", "nan_weights", "replica_divergence"]);
    // One golden run of 24 steps bounds no rate under 1 per 1,000: every verdict waits for more.
    assert!(chosen.iter().all(|c| c["verdict"] != "meets"), "{chosen:?}");
    let classes = read(&rep.join("detector_classes.csv"));
    // Runs with faults only, and among them harmed ones.
    assert!(classes.iter().all(|c| c["outcome"] != "no_fault" && num(c, "caught") <= num(c, "runs")), "{classes:?}");
    assert!(
        classes.iter().any(|c| ["immediate_nan", "slow_degrade", "sharp_slow_degrade", "sharp_degrade"].contains(&c["outcome"].as_str()))
    );
}

#[test]
fn a_signal_changed_after_the_run_fails_the_report_naming_the_run_and_recording_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let out = finished_campaign(dir.path(), "detectors", CAMPAIGN, &[]);
    let runs = read(&out.join("runs.csv"));
    let quiet = runs.iter().find(|r| r["strategy"] == "none" && r["fault"] == "none").unwrap();
    let file = out.join("runs").join(&quiet["id"]).join("signals.csv");
    let text = std::fs::read_to_string(&file).unwrap();
    // Step 3's first loss becomes NaN: the NaN-loss check would have fired there.
    let mut changed = false;
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            if !changed && f[0] == "3" && f[4] == "loss" {
                changed = true;
                let mut f = f.clone();
                f[5] = "NaN";
                return f.join(",");
            }
            l.to_string()
        })
        .collect();
    assert!(changed);
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let o = report(&out, &dir.path().join("report"), &["--detectors"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(quiet["id"].as_str()) && err.contains("first difference"), "{err}");

    // A campaign whose runs recorded no signals has nothing to score.
    let plain = finished_campaign(dir.path(), "plain", &CAMPAIGN.replace("record_signals = true, ", ""), &[]);
    assert!(!plain.join("runs").join(&read(&plain.join("runs.csv"))[0]["id"]).join("signals.csv").exists());
    let o = report(&plain, &dir.path().join("plain-report"), &["--detectors"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("detect.record_signals = true"), "{err}");
}
