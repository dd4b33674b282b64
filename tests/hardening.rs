//! A hostile user's inputs: no command overwrites or deletes a file it did not create, every
//! byte that drives training is verified or range-checked, and no input makes a command panic,
//! crash or hang. Each test here failed before the fix it guards.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::{Path, PathBuf};

use common::{Args, TINY, assert_clean_error, run, run_args, write};
use resilab_h5::{Dtype, Editor};

fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A run of the tiny configuration that checkpoints every 4 steps; returns the checkpoint root.
fn trained(dir: &Path) -> PathBuf {
    let cfg = write(dir, "ck.toml", &format!("{TINY}\n[checkpoint]\nevery_steps = 4\nkeep_last = 0\n"));
    let out = dir.join("run");
    ok(&run_args(Args::train(&cfg, &out)));
    out.join("checkpoints")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn injector(dir: &Path) -> PathBuf {
    write(dir, "inj.toml", "injection_tries = 3\nfloat_precision = 32\nfirst_bit = 1\nlast_bit = 1\nlocations_to_corrupt = [\"model\"]\n")
}

#[test]
fn inject_never_writes_over_its_input_or_its_other_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ckpt = trained(d).join("step-00000004/worker-0.h5");
    let input = d.join("in.h5");
    std::fs::copy(&ckpt, &input).unwrap();
    let original = std::fs::read(&input).unwrap();
    let cfg = injector(d);
    std::fs::create_dir(d.join("sub")).unwrap();
    std::os::unix::fs::symlink(&input, d.join("link.h5")).unwrap();
    std::fs::hard_link(&input, d.join("hard.h5")).unwrap();
    let out = d.join("out.h5");
    for log in [input.clone(), d.join("sub/../in.h5"), d.join("link.h5"), d.join("hard.h5")] {
        let o = run(&["inject", "--config", s(&cfg), "--file", s(&input), "--output", s(&out), "--log", s(&log), "--seed", "1"]);
        assert_clean_error(&o, &["--log", "the input file"]);
        assert_eq!(std::fs::read(&input).unwrap(), original, "--log {} replaced the input", log.display());
        assert!(!out.exists(), "a refused command leaves no output");
    }
    for log in [out.clone(), d.join("sub/../out.h5")] {
        let o = run(&["inject", "--config", s(&cfg), "--file", s(&input), "--output", s(&out), "--log", s(&log), "--seed", "1"]);
        assert_clean_error(&o, &["--log", "--output"]);
    }
    let o = run(&["inject", "--config", s(&cfg), "--file", s(&input), "--output", s(&d.join("hard.h5")), "--seed", "1"]);
    assert_clean_error(&o, &["--output", "input"]);
    // In place, the log still may not be the input.
    let o = run(&["inject", "--config", s(&cfg), "--file", s(&input), "--in-place", "--log", s(&input), "--seed", "1"]);
    assert_clean_error(&o, &["--log"]);
    assert_eq!(std::fs::read(&input).unwrap(), original);
    // A log that cannot be written: the command fails and leaves no corrupted copy behind.
    let o = run(&[
        "inject",
        "--config",
        s(&cfg),
        "--file",
        s(&input),
        "--output",
        s(&out),
        "--log",
        s(&d.join("no/such/dir/x.log")),
        "--seed",
        "1",
    ]);
    assert_clean_error(&o, &["no/such/dir"]);
    assert!(!out.exists(), "a failed injection left {}", out.display());
    assert!(
        std::fs::read_dir(d).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().starts_with(".resilab")),
        "staged files left behind"
    );
    // And the ordinary case still works.
    ok(&run(&["inject", "--config", s(&cfg), "--file", s(&input), "--output", s(&out), "--seed", "1"]));
    assert!(out.is_file() && d.join("out.log.jsonl").is_file());
    assert_eq!(std::fs::read(&input).unwrap(), original);
}

#[test]
fn a_checkpoint_dir_with_user_files_is_refused_and_never_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mine = d.join("mine");
    std::fs::create_dir_all(mine.join("step-99999999")).unwrap();
    std::fs::write(mine.join("notes.txt"), b"precious").unwrap();
    std::fs::write(mine.join("step-99999999/data.bin"), b"precious").unwrap();
    std::fs::create_dir(mine.join("cache.tmp")).unwrap();
    let cfg = write(d, "c.toml", &format!("{TINY}\n[checkpoint]\nevery_steps = 2\nkeep_last = 2\ndir = \"{}\"\n", mine.display()));
    let out = d.join("run");
    let o = run_args(Args::train(&cfg, &out));
    assert_clean_error(&o, &["mine", "resilab did not write", "checkpoint.adopt_dir"]);
    ok(&run_args(Args::train(&cfg, &out).set("checkpoint.adopt_dir=true")));
    assert_eq!(std::fs::read(mine.join("notes.txt")).unwrap(), b"precious");
    assert_eq!(std::fs::read(mine.join("step-99999999/data.bin")).unwrap(), b"precious");
    assert!(mine.join("cache.tmp").is_dir());
    // The foreign step-99999999 did not push the run's own newest checkpoints out.
    assert!(mine.join("step-00000006/worker-0.h5").is_file() && mine.join("step-00000008/worker-0.h5").is_file());
    assert!(!mine.join("step-00000004").exists());
    // --resume from the directory picks the run's newest checkpoint, not the foreign one.
    let again = d.join("again");
    let o = run_args(Args::train(&cfg, &again).resume_from(&mine).set("train.steps=10").set("checkpoint.dir=\"ck\""));
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("step-00000008"), "{}", String::from_utf8_lossy(&o.stderr));
    // A relative checkpoint.dir sits under --out.
    assert!(again.join("ck/step-00000010/worker-0.h5").is_file());
}

#[test]
fn empty_or_zero_checkpoint_settings_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = write(d, "c.toml", &format!("{TINY}\n[checkpoint]\nevery_steps = 2\n"));
    let out = d.join("run");
    assert_clean_error(&run_args(Args::train(&cfg, &out).set("checkpoint.dir=\"\"")), &["checkpoint.dir"]);
    assert_clean_error(&run_args(Args::train(&cfg, &out).set("checkpoint.every_steps=0")), &["checkpoint.every_steps = 0"]);
}

/// Overwrites a u64 training-state value in every worker file of a checkpoint copy.
fn set_train_state(ckpt: &Path, key: &str, value: u64) {
    let e = Editor::open(&ckpt.join("worker-0.h5")).unwrap();
    e.write_points(&format!("/train_state/{key}"), Dtype::Uint(8), &[0], &[value]).unwrap();
    e.close().unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn the_training_state_and_the_stored_configuration_are_verified() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ckpts = trained(d);
    let cfg = write(d, "r.toml", TINY);
    let resume = |ckpt: &Path, extra: &[&str]| {
        let out = d.join("resumed");
        run_args(Args::train(&cfg, &out).resume_from(ckpt).args(extra))
    };
    let load = ["--set", "checkpoint.on_mismatch=\"load\""];

    // A flipped high bit of the step: the digest catches it; loaded anyway, the range check does.
    let step = d.join("step");
    copy_dir(&ckpts.join("step-00000004"), &step);
    set_train_state(&step, "step", 4 | 1 << 63);
    let inspect = ok(&run(&["inspect", s(&step)]));
    assert!(inspect.lines().any(|l| l.contains("/train_state/step") && l.contains("MISMATCH")), "{inspect}");
    assert_clean_error(&resume(&step, &[]), &["/train_state/step", "digest"]);
    assert_clean_error(&resume(&step, &load), &["beyond this run's last step"]);

    // A flipped data cursor: an error, not a panic in the data order.
    let sample = d.join("sample");
    copy_dir(&ckpts.join("step-00000004"), &sample);
    set_train_state(&sample, "sample", 1 << 40);
    assert_clean_error(&resume(&sample, &[]), &["/train_state/sample"]);
    assert_clean_error(&resume(&sample, &load), &["data cursor", "no batch"]);

    // An edited configuration attribute: test_size 64 -> 16 by a same-length byte edit.
    let edited = d.join("edited");
    copy_dir(&ckpts.join("step-00000004"), &edited);
    let file = edited.join("worker-0.h5");
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.windows(14).position(|w| w == b"test_size = 64").expect("the stored configuration holds test_size = 64");
    bytes[at + 12..at + 14].copy_from_slice(b"16");
    std::fs::write(&file, &bytes).unwrap();
    let inspect = ok(&run(&["inspect", s(&edited)]));
    assert!(inspect.contains("attributes digest: MISMATCH"), "{inspect}");
    assert_clean_error(&run(&["eval", s(&edited)]), &["/@attributes", "digest"]);
    // The untouched checkpoint still evaluates on all 64 test images.
    let v: serde_json::Value = serde_json::from_str(&ok(&run(&["eval", "--json", s(&ckpts.join("step-00000004"))]))).unwrap();
    assert_eq!(v["test_images"], 64);
}

#[test]
fn a_cycle_of_groups_is_one_clean_error_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ckpts = trained(d);
    let looped = d.join("looped");
    copy_dir(&ckpts.join("step-00000004"), &looped);
    let file = looped.join("worker-0.h5");
    resilab_h5::add_hard_link(&file, "/model/layer1/loop", "/model").unwrap();
    let original = std::fs::read(&file).unwrap();
    let cfg = injector(d);
    let train_cfg = write(d, "r.toml", TINY);
    let out = d.join("o.h5");
    let commands: Vec<Vec<String>> = vec![
        vec!["inspect".into(), s(&file).into()],
        vec!["eval".into(), s(&file).into()],
        vec!["diff".into(), s(&ckpts.join("step-00000004/worker-0.h5")).into(), s(&file).into()],
        vec![
            "inject".into(),
            "--config".into(),
            s(&cfg).into(),
            "--file".into(),
            s(&file).into(),
            "--output".into(),
            s(&out).into(),
            "--seed".into(),
            "1".into(),
        ],
        vec![
            "train".into(),
            "--config".into(),
            s(&train_cfg).into(),
            "--out".into(),
            s(&d.join("r")).into(),
            "--quiet".into(),
            "--resume".into(),
            s(&looped).into(),
        ],
    ];
    for args in commands {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_clean_error(&run(&args), &["worker-0.h5", "/model/layer1/loop", "cycle"]);
        assert_eq!(std::fs::read(&file).unwrap(), original, "{args:?} changed its input");
    }
    assert!(!out.exists());
}

#[test]
fn a_dataset_claiming_more_than_the_file_holds_is_one_clean_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ckpts = trained(d);
    let file = ckpts.join("step-00000004/worker-0.h5");
    let huge = d.join("huge.h5");
    std::fs::copy(&file, &huge).unwrap();
    resilab_h5::add_unallocated_f32(&huge, "/model/classifier/fc/huge", &[1 << 31, 1 << 31]).unwrap();
    for args in [vec!["inspect", s(&huge)], vec!["diff", s(&file), s(&huge)], vec!["eval", s(&huge)]] {
        let o = run(&args);
        assert_clean_error(&o, &["huge.h5", "/model/classifier/fc/huge", "more than the file"]);
        assert!(String::from_utf8_lossy(&o.stderr).lines().count() <= 2, "{}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn non_regular_files_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.h5");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let start = std::time::Instant::now();
    assert_clean_error(&run(&["inspect", s(&fifo)]), &["pipe.h5", "not a regular file"]);
    assert_clean_error(&run(&["diff", s(&fifo), s(&fifo)]), &["pipe.h5", "not a regular file"]);
    assert!(start.elapsed().as_secs() < 10, "took {:?}", start.elapsed());
}

/// What every command that opens a checkpoint file is run on, and writes to.
struct Targets<'a> {
    /// The file read by `inspect`, `eval`, `diff` (against `victim.h5`), `export` and `inject`.
    file: &'a Path,
    /// A copy of it, injected in place.
    in_place: &'a Path,
    /// A checkpoint step directory holding it as `worker-0.h5`, resumed by `train`.
    resume: &'a Path,
    /// The configuration `train --resume` runs.
    cfg: &'a Path,
    /// The injection configuration.
    inj: &'a Path,
    /// `inject`'s output, `export`'s output and `train`'s run directory.
    out: &'a Path,
    st: &'a Path,
    run_dir: &'a Path,
}

impl Targets<'_> {
    /// Each command's arguments: `inspect`, `eval`, `diff`, `export`, `inject` to a copy and in
    /// place, `train --resume`.
    fn commands(&self) -> Vec<Vec<&str>> {
        vec![
            vec!["inspect", s(self.file)],
            vec!["eval", s(self.file)],
            vec!["diff", "victim.h5", s(self.file)],
            vec!["export", s(self.file), "--out", s(self.st)],
            vec!["inject", "--config", s(self.inj), "--file", s(self.file), "--output", s(self.out), "--seed", "1"],
            vec!["inject", "--config", s(self.inj), "--file", s(self.in_place), "--in-place", "--seed", "1"],
            vec!["train", "--config", s(self.cfg), "--resume", s(self.resume), "--out", s(self.run_dir), "--quiet"],
        ]
    }
}

/// Waits for `child` to end: at most `secs`, then it is killed and the test fails with `failure`
/// (a run that does not end fails here instead of hanging the suite).
fn ended_within(child: &mut std::process::Child, secs: u64, failure: &str) -> std::process::ExitStatus {
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed().as_secs() >= secs {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{failure}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Runs `resilab` with `args` in `cwd` and `env`, killed if it runs past `secs` (a command that
/// opened a FIFO would wait for a writer forever).
fn run_within(args: &[&str], cwd: &Path, env: &[(&str, &str)], secs: u64) -> std::process::Output {
    let mut c = common::resilab();
    c.args(args).current_dir(cwd).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    ended_within(&mut child, secs, &format!("resilab {args:?} ran past {secs} s: it waited on a file nobody named"));
    child.wait_with_output().unwrap()
}

/// Builds the hostile copies of `ckpt` with h5py (scripts/hostile_h5.py) into `out`; `false`
/// when h5py is missing outside CI.
fn hostile_files(ckpt: &Path, out: &Path, cases: &[&str]) -> bool {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/hostile_h5.py");
    match std::process::Command::new("python3").arg(script).arg(ckpt).arg(out).args(cases).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named") => {
            assert!(!std::env::var("CI").is_ok_and(|v| v == "true"), "python3 with h5py is required in CI (see .ci/run)");
            eprintln!("skipping: h5py is not installed");
            false
        }
        Ok(o) => panic!("hostile_h5.py failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!("python3: {e}"),
    }
}

/// Every file in `dir` with its bytes.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.path(), std::fs::read(e.path()).unwrap()))
        .collect()
}

#[test]
fn hdf5_files_that_point_elsewhere_are_refused_by_every_command_and_what_they_name_is_never_touched() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ckpts = trained(d);
    let step = ckpts.join("step-00000004");
    let h = d.join("hostile");
    let cases = ["external-storage", "passwd", "fifo", "virtual", "external-link", "soft-external"];
    if !hostile_files(&step.join("worker-0.h5"), &h, &cases) {
        return;
    }
    assert!(std::process::Command::new("mkfifo").arg(h.join("fifo")).status().unwrap().success());
    let passwd = std::fs::read("/etc/passwd").unwrap_or_default();
    let cfg = write(d, "resume.toml", &format!("{TINY}\n[checkpoint]\non_mismatch = \"load\"\n"));
    let inj = injector(d);
    // What each case's error names: the object, and where it points.
    let named = |case: &str| -> Vec<&'static str> {
        match case {
            "external-storage" => vec!["external file", "victim.raw"],
            "passwd" => vec!["external file", "/etc/passwd"],
            "fifo" => vec!["external file", "fifo"],
            "virtual" => vec!["virtual dataset", "victim.h5"],
            _ => vec!["external link", "victim.h5"],
        }
    };
    for case in cases {
        let file = h.join(format!("{case}.h5"));
        let in_place = h.join(format!("{case}-copy.h5"));
        std::fs::copy(&file, &in_place).unwrap();
        let resume = d.join(format!("resume-{case}/step-00000004"));
        std::fs::create_dir_all(&resume).unwrap();
        std::fs::copy(&file, resume.join("worker-0.h5")).unwrap();
        let before = snapshot(&h);
        let out = h.join("out.h5");
        let st = h.join("out.safetensors");
        let run_dir = d.join(format!("run-{case}"));
        let targets =
            Targets { file: &file, in_place: &in_place, resume: &resume, cfg: &cfg, inj: &inj, out: &out, st: &st, run_dir: &run_dir };
        let commands = targets.commands();
        for args in &commands {
            let o = run_within(args, &h, &[], 60);
            let mut needles = named(case);
            needles.push(if *case == *"soft-external" { "/elsewhere" } else { "/model/" });
            assert_clean_error(&o, &needles);
            assert_eq!(snapshot(&h), before, "{args:?} on {case} changed a file in the directory");
            assert!(!out.exists() && !st.exists(), "{args:?} on {case} wrote an output");
        }
        assert_eq!(std::fs::read("/etc/passwd").unwrap_or_default(), passwd);
    }
}

#[test]
fn declared_sizes_are_refused_above_the_memory_budget_naming_both_figures() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ckpts = trained(d);
    let h = d.join("hostile");
    if !hostile_files(&ckpts.join("step-00000004/worker-0.h5"), &h, &["bomb", "wide-u8"]) {
        return;
    }
    let budget = [("RESILAB_MAX_MEMORY", "1G")];
    for (case, needles) in [
        ("bomb", ["/model/bomb", "4.00 GiB", "1.00 GiB (RESILAB_MAX_MEMORY = 1G)"]),
        ("wide-u8", ["/train_state/wide", "3.73 GiB", "1.00 GiB"]),
    ] {
        let file = h.join(format!("{case}.h5"));
        for args in [vec!["inspect", s(&file)], vec!["eval", s(&file)], vec!["diff", s(&file), s(&file)]] {
            let o = run_within(&args, d, &budget, 60);
            assert_clean_error(&o, &needles);
        }
    }
    // A budget that is not a size is one error naming the variable.
    for args in [vec!["inspect", s(&h.join("bomb.h5"))], vec!["train", "--config", "nothing.toml"]] {
        let o = run_within(&args, d, &[("RESILAB_MAX_MEMORY", "lots")], 60);
        assert_clean_error(&o, &["error: RESILAB_MAX_MEMORY = \"lots\" is not a size"]);
    }
}

#[test]
fn a_model_too_large_for_memory_is_refused_from_its_configuration_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = write(d, "big.toml", TINY);
    let start = std::time::Instant::now();
    let o = run_within(
        &["train", "--config", s(&cfg), "--out", s(&d.join("out")), "--quiet", "--set", "model.width=16.0", "--set", "model.depth=1202"],
        d,
        &[],
        60,
    );
    assert_clean_error(&o, &["resnet1202-w16", "trainable values", "more than the budget of", "lower model.width or model.depth"]);
    assert!(start.elapsed().as_secs() < 20, "refused only after {:?}", start.elapsed());
    // A batch whose activations do not fit names the batch size.
    let o = run_within(&["train", "--config", s(&cfg), "--out", s(&d.join("out")), "--quiet"], d, &[("RESILAB_MAX_MEMORY", "1M")], 60);
    assert_clean_error(&o, &["train.batch_size", "RESILAB_MAX_MEMORY = 1M"]);
    // A checkpoint whose stored configuration asks for such a model (its seal renewed) is
    // refused by eval and export before the model is built, not blamed on the file.
    let ckpts = trained(d);
    let file = ckpts.join("step-00000004/worker-0.h5");
    let text = resilab_h5::Reader::open(&file).unwrap().attr_str("/", "config").unwrap();
    let huge = text.replace("width = 0.25", "width = 16.0").replace("depth = 8", "depth = 1202");
    assert_ne!(huge, text);
    resilab_h5::set_sealed_attr_str(&file, "/", "config", &huge).unwrap();
    for args in [vec!["eval", s(&file)], vec!["export", s(&file), "--out", s(&d.join("x.safetensors"))]] {
        assert_clean_error(&run_within(&args, d, &[], 60), &["resnet1202-w16", "lower model.width or model.depth"]);
    }
    // A campaign whose base does not fit fails when it is checked, before any run.
    let campaign = write(d, "c.toml", &common::NEV.replace("width = 0.25 }", "width = 16.0 }").replace("depth = 8,", "depth = 1202,"));
    let o = run_within(&["campaign", "--config", s(&campaign), "--out", s(&d.join("camp")), "--dry-run"], d, &[], 60);
    assert_clean_error(&o, &["resnet1202-w16", "more than the budget of"]);
}

/// The golden runs' temporary directories left in `golden`.
fn golden_temporaries(golden: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(golden) else { return Vec::new() };
    entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".tmp")).collect()
}

/// Waits until a golden run's temporary directory appears in `golden` (at most a minute).
fn wait_for_golden(golden: &Path) {
    let start = std::time::Instant::now();
    while golden_temporaries(golden).is_empty() {
        assert!(start.elapsed().as_secs() < 60, "the golden run never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_term_during_the_golden_run_leaves_nothing_behind_and_the_rerun_works() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A long golden run, so that the TERM lands inside it.
    let fault =
        "[[fault]]\ntarget = \"crash\"\nat_step = 5\nworker = 1\n\n[parallel]\nworkers = 2\n\n[recovery]\nstrategy = \"rollback\"\n";
    let cfg = write(d, "faulty.toml", &format!("{}\n{fault}", TINY.replace("steps = 8", "steps = 100000")));
    let (out, golden) = (d.join("out"), d.join("golden"));
    for signal in ["-TERM", "-INT"] {
        let mut child = common::resilab()
            .args(["train", "--config", s(&cfg), "--out", s(&out), "--quiet", "--golden-dir", s(&golden)])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wait_for_golden(&golden);
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(std::process::Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap().success());
        let status = ended_within(&mut child, 60, &format!("{signal} did not end the run within 60 s"));
        assert!(!status.success(), "{signal}: {status}");
        assert_eq!(golden_temporaries(&golden), Vec::<String>::new(), "{signal} left the golden run's temporary directory");
        let left: Vec<String> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert!(left.iter().all(|n| n == ".resilab.lock"), "{signal} left {left:?} in the output");
    }
    // A run started with INT ignored (a job a script put in the background) keeps ignoring it.
    let line = format!(
        "trap '' INT; exec {} train --config {} --out {} --quiet --golden-dir {}",
        env!("CARGO_BIN_EXE_resilab"),
        s(&cfg),
        s(&out),
        s(&golden)
    );
    let mut child = std::process::Command::new("sh").args(["-c", &line]).stderr(std::process::Stdio::null()).spawn().unwrap();
    wait_for_golden(&golden);
    assert!(std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "an ignored INT ended the run");
    assert!(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    ended_within(&mut child, 60, "-TERM with INT ignored did not end the run within 60 s");
    assert_eq!(golden_temporaries(&golden), Vec::<String>::new());
    // The same directory takes the run again.
    let o = run_within(
        &["train", "--config", s(&cfg), "--out", s(&out), "--quiet", "--golden-dir", s(&golden), "--set", "train.steps=8"],
        d,
        &[],
        120,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_run_whose_directory_is_replaced_stops_and_touches_nothing_in_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg =
        write(d, "long.toml", &format!("{}\n[checkpoint]\nevery_steps = 2\nkeep_last = 1\n", TINY.replace("steps = 8", "steps = 100000")));
    let out = d.join("out");
    let mut a = common::resilab()
        .args(["train", "--config", s(&cfg), "--out", s(&out), "--quiet"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !out
        .join("checkpoints")
        .read_dir()
        .is_ok_and(|mut e| e.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("step-"))))
    {
        assert!(start.elapsed().as_secs() < 60, "no checkpoint written");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::rename(&out, d.join("moved")).unwrap();
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("mine.txt"), "another user's file").unwrap();
    let status = a.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut a.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("was replaced by another directory") || err.contains("was removed"), "{err}");
    let now: Vec<String> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(now, ["mine.txt"], "the first run wrote into the new directory");
}

#[test]
fn a_hard_linked_copy_of_a_run_is_continued_without_changing_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = write(d, "ck.toml", &format!("{TINY}\n[checkpoint]\nevery_steps = 4\nkeep_last = 0\n"));
    let hl1 = d.join("hl1");
    ok(&run_args(Args::train(&cfg, &hl1).set("train.steps=4")));
    let hl2 = d.join("hl2");
    assert!(std::process::Command::new("cp").arg("-al").arg(&hl1).arg(&hl2).status().unwrap().success());
    let before = snapshot(&hl1);
    let o = run(&["train", "--config", s(&cfg), "--resume", s(&hl2.join("checkpoints")), "--out", s(&hl2)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("had other hard links"), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(snapshot(&hl1), before, "continuing the copy changed the original's files");
    assert!(
        std::fs::read_to_string(hl2.join("metrics.csv")).unwrap().lines().count()
            > std::fs::read_to_string(hl1.join("metrics.csv")).unwrap().lines().count()
    );
}

#[test]
fn export_verifies_digests_and_outputs_get_the_usual_mode() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ckpts = trained(d);
    let file = ckpts.join("step-00000004/worker-0.h5");
    let injected = d.join("injected.h5");
    let log = d.join("injected.log.jsonl");
    ok(&run(&["inject", "--config", s(&injector(d)), "--file", s(&file), "--output", s(&injected), "--log", s(&log), "--seed", "1"]));
    let st = d.join("x.safetensors");
    assert_clean_error(&run(&["export", s(&injected), "--out", s(&st)]), &["fail their stored digest", "/model/", "--allow-altered"]);
    assert!(!st.exists());
    let text = ok(&run(&["export", s(&injected), "--out", s(&st), "--allow-altered"]));
    assert!(text.contains("failed their stored digest") && text.contains("/model/"), "{text}");
    let umask_mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let plain = d.join("plain.txt");
    std::fs::write(&plain, "").unwrap();
    let plain_dir = d.join("plain-dir");
    std::fs::create_dir(&plain_dir).unwrap();
    for p in [&st, &log, &injected, &ckpts.join("step-00000004")] {
        let want = if p.is_dir() { umask_mode(&plain_dir) } else { umask_mode(&plain) };
        assert_eq!(umask_mode(p), want, "{} is {:o}, other outputs {want:o}", p.display(), umask_mode(p));
    }
}

/// Trains the tiny run in `d` and builds the hostile copy `case` of its checkpoint into
/// `d/hostile` (with its victims); `None` when h5py is missing outside CI.
fn hostile_case(d: &Path, case: &str) -> Option<PathBuf> {
    let ckpts = trained(d);
    let h = d.join("hostile");
    hostile_files(&ckpts.join("step-00000004/worker-0.h5"), &h, &[case]).then(|| h.join(format!("{case}.h5")))
}

/// Builds a shared library whose constructor writes `marker` when the library is loaded, in a
/// directory of its own: what an attacker would plant in a plugin directory.
fn planted_plugin(dir: &Path, marker: &Path) -> PathBuf {
    let src = dir.join("evil.c");
    let code = format!(
        "#include <stdio.h>\n__attribute__((constructor)) static void evil(void) {{\n  FILE *f = fopen({:?}, \"w\");\n  if (f) {{ fputs(\"ran\\n\", f); fclose(f); }}\n}}\n",
        marker.to_str().unwrap()
    );
    std::fs::write(&src, code).unwrap();
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let so = plugins.join("libevil.so");
    let o = std::process::Command::new("cc").args(["-shared", "-fPIC", "-o", s(&so), s(&src)]).output().expect("cc");
    assert!(o.status.success(), "cc: {}", String::from_utf8_lossy(&o.stderr));
    plugins
}

#[test]
fn a_dataset_needing_a_filter_plugin_is_refused_by_every_command_and_no_plugin_is_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(file) = hostile_case(d, "plugin-filter") else { return };
    let h = d.join("hostile");
    let marker = d.join("marker");
    let plugins = planted_plugin(d, &marker);
    // The check can tell: loading the planted library writes the marker.
    let o = std::process::Command::new("python3")
        .args(["-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", s(&plugins.join("libevil.so"))])
        .output()
        .unwrap();
    assert!(o.status.success() && marker.exists(), "the planted library does not leave its marker");
    std::fs::remove_file(&marker).unwrap();

    let in_place = h.join("in-place.h5");
    std::fs::copy(&file, &in_place).unwrap();
    let resume = d.join("resume/step-00000004");
    std::fs::create_dir_all(&resume).unwrap();
    std::fs::copy(&file, resume.join("worker-0.h5")).unwrap();
    let cfg = write(d, "resume.toml", &format!("{TINY}\n[checkpoint]\non_mismatch = \"load\"\n"));
    let inj = injector(d);
    let (out, st, run_dir) = (h.join("out.h5"), h.join("out.safetensors"), d.join("run-resumed"));
    let before = snapshot(&h);
    let targets =
        Targets { file: &file, in_place: &in_place, resume: &resume, cfg: &cfg, inj: &inj, out: &out, st: &st, run_dir: &run_dir };
    let commands = targets.commands();
    for args in &commands {
        let o = run_within(args, &h, &[("HDF5_PLUGIN_PATH", s(&plugins))], 60);
        assert_clean_error(&o, &["/model/", "31337", "not built into the HDF5 library"]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!stderr.contains("plugin/") && !stderr.contains("hdf5-metno-src"), "{args:?} printed a plugin directory: {stderr}");
        assert!(!marker.exists(), "{args:?} loaded the planted plugin");
        assert_eq!(snapshot(&h), before, "{args:?} changed a file in the directory");
    }
}

#[test]
fn the_memory_budget_is_one_for_the_whole_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Three never-written datasets of 880 MB each: each fits 1 GiB, two do not.
    let Some(file) = hostile_case(d, "three-bombs") else { return };
    let st = d.join("out.safetensors");
    for args in [vec!["export", s(&file), "--out", s(&st), "--allow-altered"], vec!["diff", s(&file), s(&file)]] {
        let mut c = common::resilab();
        c.args(&args).current_dir(d).env("RESILAB_MAX_MEMORY", "1G");
        let (o, peak) = common::output_and_peak_rss(&mut c);
        assert_clean_error(&o, &["three-bombs.h5", "/model/bomb", "more than is left of the memory budget of 1.00 GiB", "already holds"]);
        assert!(peak < 1200 << 20, "{args:?} peaked at {} MiB", peak >> 20);
    }
    assert!(!st.exists());
}
