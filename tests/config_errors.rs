//! Configuration values are checked before anything is allocated or run: a bad value is one
//! clean `error:` line naming its key, and a TOML error names the file and the dotted key on
//! its first line.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::process::Output;

use common::{Args, TINY, assert_clean_error, resilab, run, run_args, train_with, write};

fn first_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or_default().to_string()
}

#[test]
fn toml_errors_name_file_and_key_on_the_first_line() {
    let o = train_with(&TINY.replace("batch_size = 32", "batch_size = \"big\""), &[]);
    assert_clean_error(&o, &["bad.toml", "train.batch_size", "invalid type"]);
    let first = first_line(&o);
    assert!(
        first.starts_with("error: ")
            && first.contains("bad.toml: train.batch_size: invalid type: string \"big\", expected usize (line 18, column 14)"),
        "{first}"
    );

    let o = train_with(&TINY.replace("width = 0.25", "width = 0.25\nwidht = 2"), &[]);
    assert_clean_error(&o, &["bad.toml", "unknown field `widht`", "width"]);
    let first = first_line(&o);
    assert!(
        first.contains("bad.toml: model.widht: unknown field `widht`, expected one of") && first.contains("(line 15, column 1)"),
        "{first}"
    );

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
    let o = run_args(Args::train(&cfg, &out).set("train.epochs=1"));
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
    assert_clean_error(&o, &["data.train_size = 1000000000000 needs 769000000000000 bytes", "more than the budget of"]);
    let o = train_with(TINY, &["--set", "data.test_size=9223372036854775807"]);
    assert_clean_error(&o, &["data.test_size", "more than 2^64 bytes"]);
    assert_clean_error(&train_with(TINY, &["--set", "data.image_size=1000000"]), &["data.image_size = 1000000"]);
    assert_clean_error(&train_with(TINY, &["--set", "data.channels=1000000"]), &["data.channels = 1000000"]);
    assert_clean_error(&train_with(TINY, &["--set", "data.classes=1000000000000"]), &["data.classes = 1000000000000"]);
    assert_clean_error(&train_with(TINY, &["--set", "train.batch_size=1000000000000"]), &["train.batch_size = 1000000000000"]);
    assert_clean_error(&train_with(TINY, &["--set", "train.eval_batch_size=0"]), &["train.eval_batch_size = 0"]);
    // One record per injection attempt: a count no memory holds is an error naming the key.
    let faulty = format!("{TINY}\n[[fault]]\ntarget = \"weights\"\nat_step = 2\ninjection_tries = 100000000000000\n");
    assert_clean_error(&train_with(&faulty, &[]), &["fault[0].injection_tries", "bytes", "more than the budget of"]);
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
    assert_clean_error(&o, &["flips.yaml", "injection_tries = 1000000000000000 needs", "more than the budget of"]);
}

#[test]
fn values_valid_alone_but_not_together_are_errors() {
    let o = train_with(TINY, &["--set", "detect.extreme_threshold=-1.0"]);
    assert_clean_error(&o, &["detect.extreme_threshold = -1", "positive"]);
    let o = train_with(TINY, &["--set", "schedule.min_lr=0.5"]);
    assert_clean_error(&o, &["schedule.min_lr = 0.5 is above optimizer.lr = 0.05"]);
    let o = train_with(TINY, &["--set", "name=\"a\u{1b}[31mred\""]);
    assert_clean_error(&o, &["it contains '\\u{1b}'"]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains('\u{1b}'), "the escape reached the terminal");
}

#[test]
fn a_resume_that_would_drop_optimizer_state_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let sgd = write(d.path(), "sgd.toml", &format!("{TINY}momentum = 0.9\n\n[checkpoint]\nevery_steps = 4\n"));
    let out = d.path().join("sgd");
    assert!(run_args(Args::train(&sgd, &out)).status.success());
    let ckpt = out.join("checkpoints");
    let resume = |name: &str, set: &[&str]| {
        let o = d.path().join(name);
        let args = set.iter().fold(Args::train(&sgd, &o).resume_from(&ckpt).set("train.steps=12"), |a, s| a.set(s));
        (run_args(args), o)
    };
    let (adam, _) = resume("adam", &["optimizer.kind=\"adam\""]);
    assert_clean_error(&adam, &["optimizer state holds momentum_buffer", "Adam", "exp_avg, exp_avg_sq", "checkpoint.on_mismatch"]);
    let (plain, _) = resume("plain", &["optimizer.momentum=0.0"]);
    assert_clean_error(&plain, &["holds momentum_buffer", "keeps no buffers"]);
    let (anyway, _) = resume("anyway", &["optimizer.kind=\"adam\"", "checkpoint.on_mismatch=\"load\""]);
    assert!(anyway.status.success(), "{}", String::from_utf8_lossy(&anyway.stderr));
    // Another learning rate is allowed, warned about and recorded.
    let (lr, dir) = resume("lr", &["optimizer.lr=0.01"]);
    assert!(lr.status.success(), "{}", String::from_utf8_lossy(&lr.stderr));
    assert!(String::from_utf8_lossy(&lr.stderr).contains("warning: resuming with optimizer.lr: 0.05 -> 0.01"));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["resume_changes"], serde_json::json!(["optimizer.lr: 0.05 -> 0.01"]));
}

#[test]
fn a_lone_worker_file_names_what_is_missing_beside_it() {
    let d = tempfile::tempdir().unwrap();
    let two = write(d.path(), "two.toml", &format!("{TINY}\n[parallel]\nworkers = 2\n\n[checkpoint]\nevery_steps = 4\n"));
    let out = d.path().join("two");
    assert!(run_args(Args::train(&two, &out)).status.success());
    let lone = d.path().join("lone.h5");
    std::fs::copy(out.join("checkpoints/step-00000008/worker-0.h5"), &lone).unwrap();
    let o = run_args(Args::train(&two, &d.path().join("again")).resume_from(&lone));
    assert_clean_error(&o, &["lone.h5: is one worker's file", "which has no worker-1.h5"]);
}

#[test]
fn faults_that_could_never_strike_are_errors() {
    let beyond = format!("{TINY}\n[[fault]]\ntarget = \"weights\"\nat_step = 9\n");
    assert_clean_error(&train_with(&beyond, &[]), &["fault[0].at_step", "beyond the run's 8 step(s)"]);
    let nowhere = format!("{TINY}\n[[fault]]\ntarget = \"weights\"\nat_step = 2\nlocations_to_corrupt = [\"model/layer9\"]\n");
    assert_clean_error(&train_with(&nowhere, &[]), &["fault[0].locations_to_corrupt", "\"model/layer9\" names no tensor", "model/"]);
    let optimizer = format!(
        "{TINY}momentum = 0.9\n\n[[fault]]\ntarget = \"optimizer\"\nat_step = 2\nlocations_to_corrupt = [\"optimizer/layer1/0/conv1/weight/exp_avg\"]\n"
    );
    assert_clean_error(&train_with(&optimizer, &[]), &["fault[0].locations_to_corrupt", "exp_avg\" names no tensor"]);
    let fine = format!(
        "{TINY}momentum = 0.9\n\n[[fault]]\ntarget = \"optimizer\"\nat_step = 2\nlocations_to_corrupt = [\"optimizer/layer1\"]\n\n[[fault]]\ntarget = \"gradients\"\nat_step = 3\nlocations_to_corrupt = [\"gradients/layer1/0/conv1\"]\n"
    );
    let o = train_with(&fine, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn fault_bits_must_fit_the_training_format() {
    // In a float32 run the weight copy is the float32 weights as the passes read them: bit 20
    // exists there, not in a bf16 run's half copy.
    let copy = format!("{TINY}\n[[fault]]\ntarget = \"weight_copy\"\nat_step = 2\nlocations_to_corrupt = [\"model/layer1\"]\n");
    let wide_copy = format!("{copy}first_bit = 20\nlast_bit = 20\n");
    assert!(train_with(&wide_copy, &[]).status.success(), "a float32 run's weights have a bit 20");
    assert_clean_error(&train_with(&wide_copy, &["--set", "train.precision=fp16"]), &["fault[0].last_bit", "16-bit"]);
    // BatchNorm's parameters have no copy: a location naming only them is refused.
    let bn = format!("{TINY}\n[[fault]]\ntarget = \"weight_copy\"\nat_step = 2\nlocations_to_corrupt = [\"model/layer1/0/bn1\"]\n");
    assert_clean_error(
        &train_with(&bn, &[]),
        &["fault[0].locations_to_corrupt", "\"model/layer1/0/bn1\" names no tensor a weight_copy fault can hit"],
    );
    // A bf16 run's gradients are 16-bit: bit 20 of their word does not exist.
    let wide = format!("{TINY}\n[[fault]]\ntarget = \"gradients\"\nat_step = 2\nfirst_bit = 9\nlast_bit = 20\n");
    assert_clean_error(&train_with(&wide, &["--set", "train.precision=bf16"]), &["fault[0].last_bit", "16-bit"]);
    assert!(train_with(&wide, &[]).status.success(), "float32 gradients have a bit 20");
    // In a bf16 run the log records the flip in the half copy as bf16 bits.
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "copy.toml", &copy);
    let out = dir.path().join("out");
    let o = run_args(Args::train(&cfg, &out).set("train.precision=bf16"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let log = std::fs::read_to_string(out.join("faults.jsonl")).unwrap();
    let line: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    let rec = &line["records"][0];
    assert_eq!((rec["dtype"].as_str(), rec["precision"].as_u64()), (Some("bf16"), Some(16)), "{line}");
    assert_eq!(rec["old_bits"].as_str().map(str::len), Some(6), "a 16-bit word: {rec}");
}

#[test]
fn a_refused_resume_changes_nothing_and_a_cut_row_or_leftover_temporary_file_does_not_block() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "r.toml", &format!("{TINY}momentum = 0.9\n\n[checkpoint]\nevery_steps = 4\n"));
    let out = d.path().join("run");
    let train = || Args::train(&cfg, &out);
    assert!(run_args(train()).status.success());
    let ckpt = out.join("checkpoints/step-00000004");
    let before: Vec<Vec<u8>> = ["metrics.csv", "config.resolved.toml"].iter().map(|f| std::fs::read(out.join(f)).unwrap()).collect();
    let refused = run_args(train().resume_from(&ckpt).set("optimizer.kind=\"adam\""));
    assert_clean_error(&refused, &["optimizer state holds momentum_buffer"]);
    let after: Vec<Vec<u8>> = ["metrics.csv", "config.resolved.toml"].iter().map(|f| std::fs::read(out.join(f)).unwrap()).collect();
    assert_eq!(before, after, "a refused resume changed the run's files");
    // The last metrics row cut in the middle, as a full disk leaves it: resume drops it and goes on.
    let metrics = String::from_utf8(before[0].clone()).unwrap();
    let last = metrics.trim_end().rfind('\n').unwrap() + 1;
    let cut = last + (metrics.len() - last) / 2;
    std::fs::write(out.join("metrics.csv"), &metrics[..cut]).unwrap();
    let resumed = run_args(train().resume_from(&ckpt));
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(String::from_utf8_lossy(&resumed.stderr).contains("dropped a malformed row"));
    // A temporary file of resilab's own left in a fresh directory is not foreign.
    let fresh = d.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    std::fs::write(fresh.join("summary.tmp"), "half").unwrap();
    let o = run_args(Args::train(&cfg, &fresh));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn an_hdf5_file_that_is_not_a_checkpoint_is_named_as_such() {
    let d = tempfile::tempdir().unwrap();
    let plain = d.path().join("plain.h5");
    let w = resilab_h5::Writer::create(&plain).unwrap();
    w.write_f32("/data", &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    w.close().unwrap();
    let cfg = write(d.path(), "t.toml", TINY);
    let eval = run(&["eval", plain.to_str().unwrap()]);
    assert_clean_error(&eval, &["plain.h5: is an HDF5 file but not a resilab checkpoint"]);
    let resume = run_args(Args::train(&cfg, &d.path().join("o")).resume_from(&plain));
    assert_clean_error(&resume, &["plain.h5: is an HDF5 file but not a resilab checkpoint"]);
}

#[test]
fn a_row_lost_between_a_checkpoint_and_its_logging_is_written_again() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "r.toml", &format!("{TINY}\n[checkpoint]\nevery_steps = 4\n"));
    let out = d.path().join("run");
    let train = || Args::train(&cfg, &out);
    assert!(run_args(train()).status.success());
    let full = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    // Killed after writing checkpoint 4, before its row: the file ends at step 2's row.
    let upto2: String = full.lines().take(2).map(|l| format!("{l}\n")).collect();
    assert!(upto2.lines().last().unwrap().starts_with("2,"), "{upto2}");
    std::fs::write(out.join("metrics.csv"), &upto2).unwrap();
    let resumed = run_args(train().resume_from(&out.join("checkpoints/step-00000004")));
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(String::from_utf8_lossy(&resumed.stderr).contains("no row for step 4"));
    let rows: Vec<Vec<String>> = std::fs::read_to_string(out.join("metrics.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(), ["2", "4", "6", "8"], "every logged step once");
    let four = &rows[1];
    let original: Vec<String> = full.lines().nth(2).unwrap().split(',').map(str::to_string).collect();
    assert_eq!((four[2].as_str(), four[3].as_str()), ("", ""), "the window's loss and accuracy are not in the checkpoint: empty");
    assert_eq!(four[4], original[4], "the evaluation at step 4 is the checkpoint's model's, as the run measured it");
}
