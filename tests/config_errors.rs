//! Configuration values are checked before anything is allocated or run: a bad value is one
//! clean `error:` line naming its key, and a TOML error names the file and the dotted key on
//! its first line.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::process::Output;

use common::{TINY, assert_clean_error, resilab, run, train_with, write};


fn first_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or_default().to_string()
}

#[test]
fn toml_errors_name_file_and_key_on_the_first_line() {
    let o = train_with(&TINY.replace("batch_size = 32", "batch_size = \"big\""), &[]);
    assert_clean_error(&o, &["bad.toml", "train.batch_size", "invalid type"]);
    let first = first_line(&o);
    assert!(first.starts_with("error: ") && first.contains("bad.toml: train.batch_size: invalid type: string \"big\", expected usize (line 18, column 14)"), "{first}");

    let o = train_with(&TINY.replace("width = 0.25", "width = 0.25\nwidht = 2"), &[]);
    assert_clean_error(&o, &["bad.toml", "unknown field `widht`", "width"]);
    let first = first_line(&o);
    assert!(first.contains("bad.toml: model.widht: unknown field `widht`, expected one of") && first.contains("(line 15, column 1)"), "{first}");

    // A syntax error names the file, line and column.
    let o = train_with(&TINY.replace("steps = 8", "steps = = 8"), &[]);
    assert_clean_error(&o, &["bad.toml"]);
    let first = first_line(&o);
    assert!(first.contains("bad.toml: ") && first.ends_with("(line 17, column 9)"), "{first}");

    // A key set by --set has no line in the file.
    let o = train_with(TINY, &["--set", "train.log_every=\"often\""]);
    assert_clean_error(&o, &["bad.toml (with --set overrides): train.log_every: invalid type"]);
}

#[test]
fn injector_toml_errors_name_file_and_key_on_the_first_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "flips.toml", "injection_tries = 3\nfirst_bit = \"one\"\nuse_random_locations = true\n");
    let h5 = dir.path().join("none.h5");
    let o = run(&["inject", "--config", cfg.to_str().unwrap(), "--file", h5.to_str().unwrap()]);
    assert_clean_error(&o, &["flips.toml", "first_bit"]);
    let first = first_line(&o);
    assert!(first.contains("flips.toml: first_bit: invalid type: string \"one\", expected u32 (line 2, column 13)"), "{first}");
}

#[test]
fn epochs_and_steps_together_are_an_error() {
    let o = train_with(&TINY.replace("steps = 8", "steps = 8\nepochs = 2"), &[]);
    assert_clean_error(&o, &["train.epochs = 2", "train.steps = 8", "both set"]);
    assert_clean_error(&train_with(&TINY.replace("steps = 8", "epochs = 0"), &[]), &["train.epochs = 0"]);
}

#[test]
fn an_override_of_the_run_length_replaces_the_other_key() {
    // TINY gives steps = 8; --set train.epochs=1 trains one epoch of 128 / 32 = 4 steps instead.
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "tiny.toml", TINY);
    let out = dir.path().join("out");
    let o = run(&["train", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet", "--set", "train.epochs=1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["steps"].as_u64(), Some(4), "{summary}");
    // The resolved configuration holds one of the two keys, and loads again.
    let resolved: toml::Table = toml::from_str(&std::fs::read_to_string(out.join("config.resolved.toml")).unwrap()).unwrap();
    assert_eq!(resolved["train"].get("epochs").and_then(toml::Value::as_integer), Some(1));
    assert!(resolved["train"].get("steps").is_none(), "{resolved}");
}

#[test]
fn unsafe_run_names_are_errors() {
    for name in ["../x", "a/b", "..", ".hidden", "", "a\\\\b"] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = write(dir.path(), "bad.toml", &format!("name = \"{name}\"\n{TINY}"));
        // No --out: the name would pick the directory under results/runs.
        let o = resilab().current_dir(dir.path()).args(["train", "--config", cfg.to_str().unwrap(), "--quiet"]).output().unwrap();
        assert_clean_error(&o, &["name = ", "results/runs"]);
        let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(entries, vec![std::ffi::OsString::from("bad.toml")], "{name:?} created files");
    }
}

#[test]
fn sizes_beyond_memory_are_errors_not_aborts() {
    let o = train_with(&TINY.replace("train_size = 128", "train_size = 1000000000000"), &[]);
    assert_clean_error(&o, &["data.train_size = 1000000000000 needs 769000000000000 bytes", "available"]);
    let o = train_with(TINY, &["--set", "data.test_size=9223372036854775807"]);
    assert_clean_error(&o, &["data.test_size", "more than 2^64 bytes"]);
    assert_clean_error(&train_with(TINY, &["--set", "data.image_size=1000000"]), &["data.image_size = 1000000"]);
    assert_clean_error(&train_with(TINY, &["--set", "data.channels=1000000"]), &["data.channels = 1000000"]);
    assert_clean_error(&train_with(TINY, &["--set", "data.classes=1000000000000"]), &["data.classes = 1000000000000"]);
    assert_clean_error(&train_with(TINY, &["--set", "train.batch_size=1000000000000"]), &["train.batch_size = 1000000000000"]);
    assert_clean_error(&train_with(TINY, &["--set", "train.eval_batch_size=0"]), &["train.eval_batch_size = 0"]);
    // One record per injection attempt: a count no memory holds is an error naming the key.
    let faulty = format!("{TINY}\n[[fault]]\ntarget = \"weights\"\nat_step = 2\ninjection_tries = 100000000000000\n");
    assert_clean_error(&train_with(&faulty, &[]), &["injection_tries", "bytes", "available"]);
    // One event per random fault arrival: a length that draws more than memory holds.
    let arrivals = format!("{TINY}\n[[fault]]\ntarget = \"weights\"\nmtbf_steps = 1e-15\n");
    assert_clean_error(&train_with(&arrivals, &[]), &["train.steps = 8", "fault[0]", "mtbf_steps"]);
}

#[test]
fn injector_tries_beyond_memory_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "flips.yaml", "injection_tries: 1e15\nuse_random_locations: true\n");
    let h5 = dir.path().join("none.h5");
    let o = run(&["inject", "--config", cfg.to_str().unwrap(), "--file", h5.to_str().unwrap()]);
    assert_clean_error(&o, &["flips.yaml", "injection_tries = 1000000000000000 needs", "available"]);
}
