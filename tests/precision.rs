//! Mixed precision (`train.precision`, docs/precision.md) through the CLI: bf16 and fp16 train
//! deterministically and differently from fp32; fp16's loss scaler backs off and skips an
//! overflowing step's update (a fault's step among them), grows after its interval, and its
//! state survives a checkpoint.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::{Path, PathBuf};

use common::{TINY, assert_clean_error, csv_records, train_into, train_with, write};
use resilab_testkit::set;

fn trained(dir: &Path, name: &str, text: &str, extra: &[&str]) -> (PathBuf, serde_json::Value) {
    let cfg = write(dir, &format!("{name}.toml"), text);
    let out = dir.join(name);
    let o = train_into(&cfg, &out, extra);
    assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
    let summary = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    (out, summary)
}

fn precision(p: &str) -> String {
    set(TINY, "train.precision", &format!("\"{p}\""))
}

/// The `loss_scale` and `overflow_steps` columns of a run's metrics.csv.
fn scaler_columns(out: &Path) -> Vec<(String, String)> {
    csv_records(&out.join("metrics.csv")).into_iter().map(|r| (r["loss_scale"].clone(), r["overflow_steps"].clone())).collect()
}

/// The `loss_scale` column of a run's metrics.csv, as numbers.
fn scales(out: &Path) -> Vec<f64> {
    scaler_columns(out).iter().map(|(s, _)| s.parse().unwrap()).collect()
}

#[test]
fn bf16_and_fp16_train_deterministically_and_differently_from_fp32() {
    let dir = tempfile::tempdir().unwrap();
    let mut digests = Vec::new();
    for p in ["fp32", "bf16", "fp16"] {
        let (out, a) = trained(dir.path(), p, &precision(p), &[]);
        let (_, b) = trained(dir.path(), &format!("{p}-again"), &precision(p), &[]);
        assert_eq!(a["final_params_digest"], b["final_params_digest"], "{p}: the same seed, the same bits");
        let loss = a["final_train_loss"].as_f64().unwrap();
        assert!(loss.is_finite() && loss < 2.5, "{p}: it trains ({loss})");
        let columns = scaler_columns(&out);
        if p == "fp16" {
            // Small gradients times 2^16 fit in fp16: no overflow in this run.
            assert!(columns.iter().all(|(_, o)| o == "0") && scales(&out).iter().all(|&s| s == 65536.0), "{columns:?}");
            assert_eq!(a["overflow_steps"], 0);
        } else {
            assert!(columns.iter().all(|(s, o)| s.is_empty() && o.is_empty()), "{p}: {columns:?}");
        }
        digests.push(a["final_params_digest"].clone());
    }
    assert!(digests[0] != digests[1] && digests[1] != digests[2] && digests[0] != digests[2], "{digests:?}");
}

#[test]
fn fp16s_scaler_backs_off_on_overflow_and_grows_after_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    // A scale no fp16 gradient survives: every step overflows, no weight is updated, and the
    // scale halves each time.
    let huge = set(&precision("fp16"), "train.loss_scale", "{ init = 1e30 }");
    let (out, s) = trained(dir.path(), "huge", &set(&huge, "checkpoint.every_steps", "4"), &[]);
    assert_eq!(s["overflow_steps"], 8);
    let want: Vec<f64> = [1, 3, 5, 7].iter().map(|&k| f64::from(1e30f32 * 0.5f32.powi(k))).collect();
    assert_eq!(scales(&out), want, "the scale of each row's last step");
    assert!(scaler_columns(&out).iter().all(|(_, o)| o == "2"), "both steps of each row skipped");
    // Between the checkpoints of steps 4 and 8 only BatchNorm's running statistics changed
    // (the forward passes ran; the updates did not).
    let weights = |step: &str| -> Vec<(String, serde_json::Value)> {
        let o = common::run(&["inspect", "--json", out.join("checkpoints").join(step).to_str().unwrap()]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let all = v["datasets"].as_array().unwrap().iter().map(|d| (d["path"].as_str().unwrap().to_string(), d["stored_hash"].clone()));
        all.filter(|(p, _)| p.starts_with("/model/") && !p.contains("running_")).collect()
    };
    let (w4, w8) = (weights("step-00000004"), weights("step-00000008"));
    assert!(w4.len() > 10 && w4 == w8, "skipped steps change no weight");
    // A small scale grows every 2 clean steps: 1, 1, 2, 2, 4, 4, 8, 8.
    let grow = set(&precision("fp16"), "train.loss_scale", "{ init = 1.0, growth_interval = 2 }");
    let (out, _) = trained(dir.path(), "grow", &grow, &[]);
    assert_eq!(scales(&out), [1.0, 2.0, 4.0, 8.0]);
}

#[test]
fn a_fault_whose_step_the_scaler_skips_is_counted_as_skipped() {
    let dir = tempfile::tempdir().unwrap();
    // The exponent's top bit of 50 activations at step 3: in fp16 a value above 1 becomes Inf
    // and the others grow by 2^16, so the step's scaled gradients overflow.
    let fault =
        "\n[[fault]]\ntarget = \"neurons\"\nat_step = 3\ninjection_tries = 50\nfirst_bit = 1\nlast_bit = 1\nallow_sign_change = false\n";
    let (_, clean) = trained(dir.path(), "clean", &precision("fp16"), &[]);
    assert_eq!((clean["overflow_steps"].as_u64(), clean["scaler_skipped_faults"].as_u64()), (Some(0), Some(0)));
    let (_, hit) = trained(dir.path(), "hit", &format!("{}{fault}", precision("fp16")), &[]);
    assert_eq!((hit["overflow_steps"].as_u64(), hit["scaler_skipped_faults"].as_u64()), (Some(1), Some(1)), "{hit}");
    // Without a loss scaler there is nothing to skip: the count is absent.
    let (_, bf16) = trained(dir.path(), "bf16", &format!("{}{fault}", precision("bf16")), &[]);
    assert!(bf16["scaler_skipped_faults"].is_null() && bf16["overflow_steps"] == 0, "{bf16}");
}

#[test]
fn data_parallel_workers_and_pipeline_stages_scale_and_skip_together() {
    let dir = tempfile::tempdir().unwrap();
    let layouts = [("workers", "{ workers = 2 }"), ("stages", "{ mode = \"pipeline\", stages = 2, micro_batches = 2 }")];
    for (name, parallel) in layouts {
        let text = set(&precision("fp16"), "parallel", parallel);
        // Every step overflows on every worker (stage): no update anywhere, the scale halves.
        let huge = set(&text, "train.loss_scale", "{ init = 1e30 }");
        let (out, s) = trained(dir.path(), &format!("{name}-huge"), &huge, &[]);
        assert_eq!(s["overflow_steps"], 8, "{name}");
        assert_eq!(scales(&out).last().copied(), Some(f64::from(1e30f32 * 0.5f32.powi(7))), "{name}");
        // At the default scale nothing overflows and the run trains, the same twice.
        let (_, a) = trained(dir.path(), name, &text, &[]);
        let (_, b) = trained(dir.path(), &format!("{name}-again"), &text, &[]);
        assert_eq!(a["overflow_steps"], 0, "{name}");
        assert!(a["final_train_loss"].as_f64().unwrap().is_finite(), "{name}");
        assert_eq!(a["final_params_digest"], b["final_params_digest"], "{name}");
    }
}

#[test]
fn the_loss_scalers_state_survives_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    // The scale grows every 3 steps, so at the step-4 checkpoint the scaler is 1 step into its
    // count: a resume that lost the count would grow at another step.
    let text = set(&precision("fp16"), "train.loss_scale", "{ init = 1.0, growth_interval = 3 }");
    let text = set(&set(&text, "checkpoint.every_steps", "4"), "checkpoint.keep_last", "0");
    let (a, sa) = trained(dir.path(), "straight", &text, &[]);
    let step4 = a.join("checkpoints/step-00000004");
    let (b, sb) = trained(dir.path(), "resumed", &text, &["--resume", step4.to_str().unwrap()]);
    assert_eq!(sa["final_params_digest"], sb["final_params_digest"]);
    let tail = |out: &Path| {
        let rows = csv_records(&out.join("metrics.csv"));
        rows.into_iter()
            .filter(|r| r["step"].parse::<u64>().unwrap() > 4)
            .map(|r| (r["step"].clone(), r["loss_scale"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(tail(&a), tail(&b), "rows after the resume");
    assert_eq!(tail(&a).last().unwrap().1.parse::<f64>().unwrap(), 4.0, "grown at steps 3 and 6");
}

#[test]
fn bad_precision_values_name_the_key() {
    let o = train_with(&precision("fp8"), &[]);
    assert_clean_error(&o, &["train.precision"]);
    let o = train_with(&set(&precision("fp16"), "train.loss_scale", "{ backoff_factor = 2.0 }"), &[]);
    assert_clean_error(&o, &["train.loss_scale.backoff_factor = 2"]);
    let o = train_with(&set(&precision("fp16"), "train.loss_scale", "{ init_scale = 2.0 }"), &[]);
    assert_clean_error(&o, &["init_scale"]);
}
