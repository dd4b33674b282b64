//! A hostile user's inputs: no command overwrites or deletes a file it did not create, every
//! byte that drives training is verified or range-checked, and no input makes a command panic,
//! crash or hang. Each test here failed before the fix it guards.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::{Path, PathBuf};

use common::{TINY, assert_clean_error, run, write};
use resilab_h5::{Dtype, Editor};

fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A run of the tiny configuration that checkpoints every 4 steps; returns the checkpoint root.
fn trained(dir: &Path) -> PathBuf {
    let cfg = write(dir, "ck.toml", &format!("{TINY}\n[checkpoint]\nevery_steps = 4\nkeep_last = 0\n"));
    let out = dir.join("run");
    ok(&run(&["train", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"]));
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
    let o = run(&["train", "--config", s(&cfg), "--out", s(&out), "--quiet"]);
    assert_clean_error(&o, &["mine", "resilab did not write", "checkpoint.adopt_dir"]);
    ok(&run(&["train", "--config", s(&cfg), "--out", s(&out), "--quiet", "--set", "checkpoint.adopt_dir=true"]));
    assert_eq!(std::fs::read(mine.join("notes.txt")).unwrap(), b"precious");
    assert_eq!(std::fs::read(mine.join("step-99999999/data.bin")).unwrap(), b"precious");
    assert!(mine.join("cache.tmp").is_dir());
    // The foreign step-99999999 did not push the run's own newest checkpoints out.
    assert!(mine.join("step-00000006/worker-0.h5").is_file() && mine.join("step-00000008/worker-0.h5").is_file());
    assert!(!mine.join("step-00000004").exists());
    // --resume from the directory picks the run's newest checkpoint, not the foreign one.
    let again = d.join("again");
    let o = run(&[
        "train",
        "--config",
        s(&cfg),
        "--out",
        s(&again),
        "--quiet",
        "--resume",
        s(&mine),
        "--set",
        "train.steps=10",
        "--set",
        "checkpoint.dir=\"ck\"",
    ]);
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
    assert_clean_error(
        &run(&["train", "--config", s(&cfg), "--out", s(&out), "--quiet", "--set", "checkpoint.dir=\"\""]),
        &["checkpoint.dir"],
    );
    assert_clean_error(
        &run(&["train", "--config", s(&cfg), "--out", s(&out), "--quiet", "--set", "checkpoint.every_steps=0"]),
        &["checkpoint.every_steps = 0"],
    );
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
        let mut args = vec!["train", "--config", s(&cfg), "--out", s(&out), "--quiet", "--resume", s(ckpt)];
        args.extend_from_slice(extra);
        run(&args)
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
