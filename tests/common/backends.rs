//! Checks shared by the tests of the backends other than flex (`tests/wgpu.rs`, `tests/tch.rs`,
//! `tests/ndarray.rs`): the same CLI runs on `backend` and on flex, compared within stated
//! tolerances. `cli` runs `resilab` with the given arguments (a test may add environment).

use std::path::Path;
use std::process::Output;

use super::{TINY, resilab, resilab_at, write};

/// The environment variable naming the `resilab` binary these checks run flex on; unset, they
/// run it on the binary under test. CI points it at the README build's binary: its flex is
/// compiled at opt-level 3, while the backends' build compiles burn-flex at opt-level 0
/// (`.ci/backends.toml`). The same source gives the same numbers at any opt-level (Rust does
/// not reassociate or contract floating-point arithmetic), so the comparisons are unchanged.
pub const FLEX_BIN: &str = "RESILAB_TEST_FLEX_BIN";

/// `resilab` on flex: the binary `FLEX_BIN` names, or the one under test.
pub fn flex_cli(args: &[&str]) -> Output {
    let mut c = match std::env::var_os(FLEX_BIN) {
        Some(bin) => resilab_at(bin),
        None => resilab(),
    };
    c.args(args).output().expect("run resilab on flex")
}

/// Four classes that ResNet-8/4 learns in 48 steps (flex: test accuracy 0.91; chance 0.25).
pub const LEARN: &str = r#"
seed = 7

[data]
source = "synthetic"
train_size = 512
test_size = 128
image_size = 16
classes = 4
difficulty = 0.2

[model]
arch = "resnet"
depth = 8
width = 0.25

[train]
epochs = 3
batch_size = 32
log_every = 1
"#;

/// Two replicas with checkpoints at steps 3 and 6 and a NaN-producing flip in replica 1's
/// weights at step 5 (on a device, the injector reads the tensors back, flips the bits and
/// writes them back). Four classes, as in `LEARN`: on wgpu the two then share more kernels
/// (each shape compiles its own); with one binary on lavapipe, LEARN's first run after the
/// faulty runs took 81 s with four classes in them, 104 s with ten.
pub fn faulty(strategy: &str) -> String {
    let tiny = resilab_testkit::set(TINY, "data.classes", "4");
    format!(
        "{tiny}\n[parallel]\nworkers = 2\n\n[checkpoint]\nevery_steps = 3\nkeep_last = 0\n\n\
         [[fault]]\ntarget = \"weights\"\nat_step = 5\nworker = 1\ninjection_tries = 40\nsampling = \"per_element\"\n\
         first_bit = 1\nlast_bit = 1\nallow_sign_change = false\nlocations_to_corrupt = [\"model/layer1\"]\n\n\
         [recovery]\nstrategy = \"{strategy}\"\n"
    )
}

/// Runs `resilab <command> --config cfg --out out --quiet --golden-dir dir/golden` with
/// `extra` and checks it succeeded.
pub fn command(cli: &dyn Fn(&[&str]) -> Output, command: &str, dir: &Path, cfg: &Path, out: &Path, extra: &[&str]) -> Output {
    let golden = dir.join("golden");
    let mut args = vec![
        command,
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
        "--golden-dir",
        golden.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = cli(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

pub fn summary(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

/// Trains `cfg` on `backend` into `dir/name` and returns the summary.
pub fn train(cli: &dyn Fn(&[&str]) -> Output, dir: &Path, name: &str, cfg: &str, backend: &str) -> serde_json::Value {
    let file = write(dir, &format!("{name}.toml"), cfg);
    let out = dir.join(name);
    command(cli, "train", dir, &file, &out, &["--backend", backend]);
    summary(&out)
}

/// `(step, loss)` of every logged step.
fn losses(dir: &Path) -> Vec<(u64, f64)> {
    let mut r = csv::Reader::from_path(dir.join("metrics.csv")).unwrap();
    r.records().map(|row| row.unwrap()).map(|row| (row[0].parse().unwrap(), row[2].parse().unwrap())).collect()
}

/// The runs in `dir/<backend>` and `dir/flex` logged the same steps, and their losses agree
/// within the tolerances stated below; returns `backend`'s `(step, loss)` rows.
pub fn losses_agree_with_flex(dir: &Path, backend: &str) -> Vec<(u64, f64)> {
    let (lo, lf) = (losses(&dir.join(backend)), losses(&dir.join("flex")));
    assert_eq!(lo.iter().map(|r| r.0).collect::<Vec<_>>(), lf.iter().map(|r| r.0).collect::<Vec<_>>());
    for ((step, a), (_, b)) in lo.iter().zip(&lf) {
        let rel = (a - b).abs() / b.abs();
        let bound = if *step <= 10 {
            1e-3
        } else if *step <= 20 {
            1e-2
        } else {
            0.25
        };
        assert!(rel <= bound, "step {step}: loss {backend} {a}, flex {b} (relative difference {rel:.2e} > {bound})");
    }
    lo
}

/// Trains LEARN on `backend` and on flex: the model learns on `backend`, and its losses agree
/// with flex's within the tolerances below. Returns the summary of the run on `backend`.
///
/// The two backends order floating-point reductions differently, so their values differ in
/// the last bits from the first step on, and training amplifies the difference. Measured on
/// wgpu (lavapipe) and on tch alike: at most 5.7e-5 relative in the loss of steps 1-10 and
/// 7.7e-4 in steps 11-20; 11.5% at step 48, where the loss is about 0.08; final test accuracy
/// 0.922 against flex's 0.914.
pub fn learns_and_agrees_with_flex(cli: &dyn Fn(&[&str]) -> Output, dir: &Path, backend: &str) -> serde_json::Value {
    let other = train(cli, dir, backend, LEARN, backend);
    let flex = train(&flex_cli, dir, "flex", LEARN, "flex");
    let (acc_o, acc_f) = (other["final_test_acc"].as_f64().unwrap(), flex["final_test_acc"].as_f64().unwrap());
    assert!(acc_o >= 0.75, "the model learns on {backend}: test accuracy {acc_o} (chance 0.25)");
    assert!((acc_o - acc_f).abs() <= 0.05, "final test accuracy: {backend} {acc_o}, flex {acc_f}");
    assert_eq!(losses_agree_with_flex(dir, backend).len(), 48);
    other
}

/// A second run of `cfg` on `backend`, in a new process, ends on the same weights, bit for bit,
/// as `first` (the summary of the first run, as `train` returned it).
pub fn repeats_bit_for_bit(cli: &dyn Fn(&[&str]) -> Output, dir: &Path, backend: &str, cfg: &str, first: &serde_json::Value) {
    let again = train(cli, dir, &format!("{backend}-again"), cfg, backend);
    assert_eq!(again["final_params_digest"], first["final_params_digest"], "{backend} repeats bit for bit");
}

/// The strategies `faults_checkpoints_and_recovery_work` compares, in one process.
const STRATEGIES: [&str; 4] = ["none", "rollback", "lossy_forward", "checkpoint_restart"];

/// The NaN-producing weight fault on `backend`, under every strategy in one `compare` (one
/// process: on wgpu each process compiles its kernels again, about 30 s on lavapipe): without
/// protection the NaN spreads; rollback detects it in its step and rolls back to the golden
/// run's exact weights, computed on the same backend; on flex the fault hits the same values
/// with the same bits. Checkpoint-restart reloads the step-3 checkpoint written from the
/// backend's tensors, `inspect` reads the step-6 one, and resuming from it in a new process
/// ends where the uninterrupted run ended, bit for bit.
pub fn faults_checkpoints_and_recovery_work(cli: &dyn Fn(&[&str]) -> Output, dir: &Path, backend: &str) {
    let cfg = write(dir, "faulty.toml", &faulty("none"));
    let root = dir.join("compare");
    command(cli, "compare", dir, &cfg, &root, &["--backend", backend, "--strategies", &STRATEGIES.join(",")]);
    let mut r = csv::Reader::from_path(root.join("strategies.csv")).unwrap();
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    assert_eq!(rows.iter().map(|x| &x[0]).collect::<Vec<_>>(), STRATEGIES);
    let collapsed = r.headers().unwrap().iter().position(|h| h == "collapsed").unwrap();
    assert_eq!(&rows[0][collapsed], "true", "unprotected, the NaN spreads: {:?}", rows[0]);
    assert_eq!(&rows[1][collapsed], "false", "{:?}", rows[1]);

    let rollback = summary(&root.join("rollback"));
    assert_eq!(rollback["detections"][0]["step"], 5, "detected in the step of the fault");
    assert_eq!(rollback["steps_recomputed"], 1);
    let golden = summary(Path::new(rollback["golden"]["dir"].as_str().unwrap()));
    assert_eq!(golden["provenance"]["backend"], backend, "the golden run is computed on the same backend");
    assert_eq!(rollback["final_params_digest"], golden["final_params_digest"], "rollback leaves no trace on {backend} either");
    flex_hits_the_same_bits(dir, &root.join("rollback"), &rollback);

    let restart = summary(&root.join("checkpoint_restart"));
    assert_eq!(restart["restarts"][0]["to_step"], 3);
    assert_eq!(restart["final_params_digest"], golden["final_params_digest"]);
    let ckpt = root.join("checkpoint_restart/checkpoints/step-00000006/worker-0.h5");
    let o = cli(&["inspect", ckpt.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let cfg = write(dir, "resume.toml", &faulty("checkpoint_restart"));
    let out = dir.join("resumed");
    command(cli, "train", dir, &cfg, &out, &["--backend", backend, "--resume", ckpt.parent().unwrap().to_str().unwrap()]);
    assert_eq!(summary(&out)["final_params_digest"], restart["final_params_digest"], "a new process repeats {backend}'s steps bit for bit");
}

/// The faulty rollback run on flex logs the same flips (datasets, indices, bits, outcomes) as
/// the one in `run` (whose summary is `other`), and keeps a golden run of its own.
fn flex_hits_the_same_bits(dir: &Path, run: &Path, other: &serde_json::Value) {
    let flex = train(&flex_cli, dir, "rollback-flex", &faulty("rollback"), "flex");
    let log = |run: &Path| -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(run.join("faults.jsonl")).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let (lo, lf) = (log(run), log(&dir.join("rollback-flex")));
    assert_eq!(lo.len(), 1);
    let key = |r: &serde_json::Value| (r["dataset"].clone(), r["index"].clone(), r["bits_reference"].clone(), r["outcome"].clone());
    let (ro, rf) = (lo[0]["records"].as_array().unwrap(), lf[0]["records"].as_array().unwrap());
    assert_eq!(ro.len(), 40);
    assert_eq!(ro.iter().map(key).collect::<Vec<_>>(), rf.iter().map(key).collect::<Vec<_>>());
    assert_ne!(flex["golden"]["dir"], other["golden"]["dir"], "golden runs are kept per backend");
}
