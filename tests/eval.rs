//! `resilab eval` (a checkpoint's test accuracy and NaN / extreme-value counts, no training)
//! and `resilab advise` (Young and Daly checkpoint intervals) as a user runs them.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;

use common::{Args, TINY, assert_clean_error, run, run_args, write};

fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(ok(o).trim()).unwrap()
}

/// Trains TINY with a checkpoint at its last step (8); returns the run directory.
fn train(dir: &Path, extra: &[&str]) -> std::path::PathBuf {
    let cfg = write(dir, "c.toml", TINY);
    let out = dir.join("run");
    ok(&run_args(Args::train(&cfg, &out).set("checkpoint.every_steps=8").args(extra)));
    out
}

#[test]
fn eval_reports_the_trained_accuracy_then_the_damage_of_an_injection() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = train(d, &[]);
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let step = out.join("checkpoints/step-00000008");

    // The configuration comes from the checkpoint; the model is the one the run evaluated last.
    let clean = json(&run(&["eval", step.to_str().unwrap(), "--json"]));
    assert_eq!(clean["step"], 8);
    assert_eq!(clean["test_acc"], summary["final_test_acc"]);
    assert_eq!(clean["test_images"], 64);
    assert!(clean["values"].as_u64().unwrap() > 5_000);
    assert_eq!((clean["nan"].as_u64(), clean["inf"].as_u64(), clean["extreme"].as_u64()), (Some(0), Some(0), Some(0)));
    assert_eq!(clean["digest_mismatches"], serde_json::json!([]));
    // --predictions: one row per test image, the predicted class the arg-max of its logits,
    // the correct ones the accuracy eval reports; an existing file is never replaced.
    let preds = d.join("predictions.csv");
    let with = json(&run(&["eval", step.to_str().unwrap(), "--json", "--predictions", preds.to_str().unwrap()]));
    assert_eq!(with["test_acc"], clean["test_acc"]);
    let text = std::fs::read_to_string(&preds).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("image,label,predicted,logit_0,logit_1,logit_2,logit_3,logit_4,logit_5,logit_6,logit_7,logit_8,logit_9"));
    let rows: Vec<Vec<f64>> = lines.map(|l| l.split(',').map(|v| v.parse().unwrap()).collect()).collect();
    assert_eq!(rows.len(), 64);
    let mut correct = 0;
    for (i, r) in rows.iter().enumerate() {
        let best = (0..10).fold(0, |b, k| if r[3 + k] > r[3 + b] { k } else { b });
        assert_eq!((r[0], r[2]), (i as f64, best as f64), "row {i}");
        correct += usize::from(r[1] == r[2]);
    }
    assert_eq!(correct as f64 / 64.0, clean["test_acc"].as_f64().unwrap());
    let again = run(&["eval", step.to_str().unwrap(), "--predictions", preds.to_str().unwrap()]);
    assert_clean_error(&again, &["predictions.csv", "exists", "never replaces"]);
    assert_eq!(std::fs::read_to_string(&preds).unwrap(), text);

    // A directory of checkpoints means its newest; --set changes the stored configuration.
    let fewer = json(&run(&["eval", out.join("checkpoints").to_str().unwrap(), "--json", "--set", "data.test_size=32"]));
    assert_eq!((fewer["step"].as_u64(), fewer["test_images"].as_u64()), (Some(8), Some(32)));

    // 40 flips of the exponent's top bit in the first residual stage: values below 1 in
    // magnitude become about 1e38 (extreme) and the digests no longer match.
    let file = step.join("worker-0.h5");
    let cfg = write(
        d,
        "crit.toml",
        "injection_tries = 40\nfloat_precision = 32\nfirst_bit = 1\nlast_bit = 1\nallow_sign_change = false\nsampling = \"per_element\"\nlocations_to_corrupt = [\"/model/layer1\"]\n",
    );
    ok(&run(&[
        "inject",
        "-c",
        cfg.to_str().unwrap(),
        "-f",
        file.to_str().unwrap(),
        "--seed",
        "3",
        "--in-place",
        "--log",
        d.join("log.jsonl").to_str().unwrap(),
    ]));
    let hit = json(&run(&["eval", file.to_str().unwrap(), "--json"]));
    let bad = hit["nan"].as_u64().unwrap() + hit["inf"].as_u64().unwrap() + hit["extreme"].as_u64().unwrap();
    assert!((30..=40).contains(&bad), "40 flips of the critical bit: {hit}");
    assert!(!hit["digest_mismatches"].as_array().unwrap().is_empty());
    assert_eq!(hit["values"], clean["values"]);
    let text = ok(&run(&["eval", file.to_str().unwrap()]));
    assert!(text.contains("no longer match their digest") && text.contains("extreme"), "{text}");
}

#[test]
fn eval_of_a_broken_or_missing_checkpoint_is_a_clean_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_clean_error(&run(&["eval", d.join("nothing-here").to_str().unwrap()]), &["nothing-here"]);
    let out = train(d, &[]);
    let file = out.join("checkpoints/step-00000008/worker-0.h5");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 3]).unwrap();
    assert_clean_error(&run(&["eval", file.to_str().unwrap()]), &["worker-0.h5"]);
}

#[test]
fn advise_gives_young_and_daly_intervals() {
    let a = json(&run(&["advise", "--checkpoint-cost", "60", "--mtbf", "86400", "--json"]));
    assert!((a["young_s"].as_f64().unwrap() - 3219.94).abs() < 0.01, "{a}");
    assert!((a["daly_s"].as_f64().unwrap() - 3180.06).abs() < 0.01, "{a}");
    let (yw, dw) = (a["young_waste"].as_f64().unwrap(), a["daly_waste"].as_f64().unwrap());
    assert!(dw <= yw && dw > 0.03 && dw < 0.04, "about sqrt(2C/M) = 3.7% lost: {a}");
    let text = ok(&run(&["advise", "--checkpoint-cost", "60", "--mtbf", "86400", "--restart-cost", "120"]));
    assert!(text.contains("Young: checkpoint every 3219.9 s") && text.contains("Daly:  checkpoint every 3180.1 s"), "{text}");
    assert_clean_error(&run(&["advise", "--checkpoint-cost=-1", "--mtbf", "10"]), &["--checkpoint-cost"]);

    // The checkpoint cost a run measured.
    let dir = tempfile::tempdir().unwrap();
    let out = train(dir.path(), &["--set", "checkpoint.every_steps=2"]);
    let r = json(&run(&["advise", "--from-run", out.to_str().unwrap(), "--mtbf", "3600", "--json"]));
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let per = summary["checkpoint_s"].as_f64().unwrap() / summary["checkpoints"].as_f64().unwrap();
    assert!((r["checkpoint_s"].as_f64().unwrap() - per).abs() < 1e-12, "{r}");
    // The intervals in the run's own steps, and the line to paste into its configuration.
    let step_s = summary["train_s"].as_f64().unwrap() / summary["steps"].as_f64().unwrap();
    assert!((r["step_s"].as_f64().unwrap() - step_s).abs() < 1e-12, "{r}");
    let daly_steps = (r["daly_s"].as_f64().unwrap() / step_s).round().max(1.0) as u64;
    assert_eq!(r["daly_steps"].as_u64(), Some(daly_steps), "{r}");
    let text = ok(&run(&["advise", "--from-run", out.to_str().unwrap(), "--mtbf", "3600"]));
    assert!(text.contains(&format!("[checkpoint] every_steps = {daly_steps}")), "{text}");
    let cfg = write(dir.path(), "plain.toml", TINY);
    let plain = dir.path().join("plain");
    ok(&run_args(Args::train(&cfg, &plain)));
    assert_clean_error(&run(&["advise", "--from-run", plain.to_str().unwrap(), "--mtbf", "3600"]), &["no checkpoints"]);
}

/// `inject` writes `worker-0.injected.h5` beside the clean file by default. `eval` and
/// `train --resume` on that file read it, never its clean sibling `worker-0.h5`.
#[test]
fn an_injected_copy_beside_the_clean_file_is_read_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = train(d, &[]);
    let step = out.join("checkpoints/step-00000008");
    let clean_file = step.join("worker-0.h5");
    let cfg = write(
        d,
        "crit.toml",
        "injection_tries = 40\nfloat_precision = 32\nfirst_bit = 1\nlast_bit = 1\nallow_sign_change = false\nsampling = \"per_element\"\nlocations_to_corrupt = [\"/model/layer1\"]\n",
    );
    ok(&run(&["inject", "-c", cfg.to_str().unwrap(), "-f", clean_file.to_str().unwrap(), "--seed", "3"]));
    let injected = step.join("worker-0.injected.h5");
    assert!(injected.is_file(), "inject's default output");

    let clean = json(&run(&["eval", clean_file.to_str().unwrap(), "--json"]));
    let hit = json(&run(&["eval", injected.to_str().unwrap(), "--json"]));
    assert_eq!(clean["nan"].as_u64().unwrap() + clean["inf"].as_u64().unwrap() + clean["extreme"].as_u64().unwrap(), 0);
    let bad = hit["nan"].as_u64().unwrap() + hit["inf"].as_u64().unwrap() + hit["extreme"].as_u64().unwrap();
    assert!(bad >= 30, "the injected copy's values, not the clean file's: {hit}");
    assert!(!hit["digest_mismatches"].as_array().unwrap().is_empty());

    // Resuming from the copy loads it (and the run records it), not the clean file.
    let resume = |from: &Path, name: &str| -> serde_json::Value {
        let cfg = write(d, &format!("{name}.toml"), &TINY.replace("steps = 8", "steps = 10"));
        let o = d.join(name);
        ok(&run_args(Args::train(&cfg, &o).resume_from(from).set("checkpoint.on_mismatch=\"load\"")));
        serde_json::from_slice(&std::fs::read(o.join("summary.json")).unwrap()).unwrap()
    };
    let from_copy = resume(&injected, "from-copy");
    assert_eq!(from_copy["resumed_from"].as_str().unwrap(), injected.to_str().unwrap());
    assert!(!from_copy["checkpoint_mismatches"].as_array().unwrap().is_empty(), "{from_copy}");
    let from_clean = resume(&clean_file, "from-clean");
    assert_ne!(from_copy["final_params_digest"], from_clean["final_params_digest"]);

    // Resuming a finished run trains nothing: an error that says so, not a success line.
    let cfg = write(d, "same.toml", TINY);
    let o = d.join("finished");
    let args =
        ["train", "--config", cfg.to_str().unwrap(), "--out", o.to_str().unwrap(), "--quiet", "--resume", clean_file.to_str().unwrap()];
    assert_clean_error(&run(&args), &["holds step 8", "nothing is left to train"]);
}
