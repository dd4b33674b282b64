//! An import stays marked until a probe verifies it, and the smaller import and export
//! frictions of issue 63: an unverified import says so in `inspect`, `eval`, `train --resume`
//! and the resumed run's summary, and an import with a probe into the same directory verifies
//! it; export undoes `${1}` renames; `num_batches_tracked` survives import and export; a CIFAR-10
//! import with `data.train_size` reads only the batches it needs.
//!
//! The weights and probes are the PyTorch fixtures of tests/pytorch.rs (made by
//! scripts/pytorch_fixtures.py); PyTorch itself is not needed.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{assert_clean_error, run, write};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch").join(name)
}

/// A ResNet-8 on 32x32 RGB synthetic images normalised as the fixtures' probe was made.
const RESNET8: &str = r#"
seed = 3
[data]
train_size = 16
test_size = 16
normalize = { mean = [0.4914, 0.4822, 0.4465], std = [0.2470, 0.2435, 0.2616] }
[model]
arch = "resnet"
depth = 8
[train]
steps = 2
batch_size = 8
[optimizer]
kind = "sgd"
lr = 0.05
momentum = 0.9
"#;

fn import(dir: &Path, weights: &Path, text: &str, out: &str, extra: &[&str]) -> Output {
    let cfg = write(dir, &format!("{out}.toml"), text);
    let out = dir.join(out);
    let mut args = vec!["import", weights.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    run(&args)
}

fn ok(o: &Output) -> (String, String) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (String::from_utf8(o.stdout.clone()).unwrap(), String::from_utf8(o.stderr.clone()).unwrap())
}

/// The lines of `stderr` that say the forward pass is unverified.
fn unverified_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("forward pass unverified")).collect()
}

fn export(ckpt: &Path, out: &Path, extra: &[&str]) -> (String, String) {
    ok(&run(&[&["export", ckpt.to_str().unwrap(), "--out", out.to_str().unwrap()], extra].concat()))
}

#[test]
fn an_unverified_import_says_so_wherever_it_is_used_until_a_probe_verifies_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (out, _) = ok(&import(d, &fixture("resnet8.pt"), RESNET8, "u", &[]));
    assert!(out.contains("forward pass unverified") && out.contains("the checkpoint records this"), "{out}");
    let ckpt = d.join("u/step-00000000");
    let ckpt_s = ckpt.to_str().unwrap();
    // inspect, eval and train --resume: one line each on stderr, naming the file.
    for args in [vec!["inspect", ckpt_s], vec!["eval", ckpt_s]] {
        let (_, err) = ok(&run(&args));
        let lines = unverified_lines(&err);
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(lines[0].contains("worker-0.h5") || lines[0].contains("step-00000000"), "{}", lines[0]);
        assert!(lines[0].contains("resilab import --probe"), "{}", lines[0]);
    }
    let eval: serde_json::Value = serde_json::from_str(&ok(&run(&["eval", ckpt_s, "--json"])).0).unwrap();
    assert_eq!(eval["forward_pass"]["status"], "unverified", "{eval}");
    let cfg = d.join("u.toml");
    let resumed = d.join("resumed");
    let train = ["train", "--config", cfg.to_str().unwrap(), "--resume", ckpt_s, "--out", resumed.to_str().unwrap(), "--quiet"];
    let (_, err) = ok(&run(&train));
    assert_eq!(unverified_lines(&err).len(), 1, "{err}");
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(resumed.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["resumed_forward_pass"]["status"], "unverified", "{summary}");
    let before = d.join("before.safetensors");
    let (_, err) = export(&ckpt, &before, &[]);
    assert!(unverified_lines(&err).is_empty(), "export is not affected: {err}");

    // The same import again without a probe is refused, saying how to verify it; another
    // file's weights with a probe are refused before the probe runs.
    let probe = fixture("resnet8-probe.safetensors");
    let probe = ["--probe", probe.to_str().unwrap()];
    assert_clean_error(
        &import(d, &fixture("resnet8.pt"), RESNET8, "u", &[]),
        &["an unverified import", "the same import with --probe FILE verifies in place"],
    );
    let other = import(d, &fixture("resnet8-stride.pt"), RESNET8, "u", &probe);
    assert_clean_error(&other, &["holds an unverified import of other weights"]);
    // With the probe: verified in place, and nothing says unverified any more.
    let (out, _) = ok(&import(d, &fixture("resnet8.pt"), RESNET8, "u", &probe));
    assert!(out.contains("forward pass verified") && out.contains("replaced by the verified one"), "{out}");
    let (listing, err) = ok(&run(&["inspect", ckpt_s]));
    assert!(unverified_lines(&err).is_empty(), "{err}");
    assert!(listing.contains("@forward_pass = verified: probe resnet8-probe.safetensors (8 images"), "{listing}");
    let (_, err) = ok(&run(&["eval", ckpt_s]));
    assert!(unverified_lines(&err).is_empty(), "{err}");
    // The exported file is the same, byte for byte, verified or not.
    let after = d.join("after.safetensors");
    export(&ckpt, &after, &[]);
    assert_eq!(std::fs::read(&before).unwrap(), std::fs::read(&after).unwrap());
}

#[test]
fn num_batches_tracked_goes_through_import_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let source = resilab_interop::source::read(&fixture("resnet8.pt")).unwrap().model;
    let counts: Vec<(&String, f32)> =
        source.iter().filter(|(k, _)| k.ends_with(".num_batches_tracked")).map(|(k, h)| (k, h.values[0])).collect();
    assert!(counts.len() > 3 && counts.iter().all(|(_, c)| *c > 0.0), "the fixture's counts: {counts:?}");
    let (out, _) = ok(&import(d, &fixture("resnet8.pt"), RESNET8, "a", &[]));
    assert!(out.contains(&format!("kept {} BatchNorm num_batches_tracked counts", counts.len())), "{out}");
    let file = d.join("a.safetensors");
    export(&d.join("a"), &file, &[]);
    let exported = resilab_interop::source::read(&file).unwrap().model;
    for (name, count) in &counts {
        assert_eq!(exported[*name].values, [*count], "{name}");
    }
    // A checkpoint resilab trained holds none: its count is its step.
    let cfg = write(d, "run.toml", RESNET8);
    let run_dir = d.join("run");
    ok(&run(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        run_dir.to_str().unwrap(),
        "--quiet",
        "--set",
        "checkpoint.every_steps=2",
    ]));
    let trained = d.join("trained.safetensors");
    export(&run_dir.join("checkpoints/step-00000002"), &trained, &[]);
    assert_eq!(resilab_interop::source::read(&trained).unwrap().model["layer1.0.bn1.num_batches_tracked"].values, [2.0]);
}

#[test]
fn an_export_puts_back_what_a_rename_with_groups_took() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&import(d, &fixture("resnet8.pt"), RESNET8, "a", &[]));
    // A module that calls resilab's `layer<N>.0.` `stage<N>.block0.`: the documented form.
    let rules = format!("{RESNET8}\n[[import.rename]]\nfrom = \"^stage(\\\\d+)\\\\.block0\\\\.\"\nto = \"layer${{1}}.0.\"\n");
    let cfg = write(d, "renames.toml", &rules);
    let file = d.join("theirs.safetensors");
    export(&d.join("a"), &file, &["--renames-from", cfg.to_str().unwrap()]);
    let theirs = resilab_interop::source::read(&file).unwrap().model;
    assert!(theirs.contains_key("stage2.block0.conv1.weight") && theirs.contains_key("stem.conv.weight"), "{:?}", theirs.keys());
    assert!(!theirs.keys().any(|k| k.starts_with("layer")), "{:?}", theirs.keys());
    // Imported back with the same rules, the weights are the checkpoint's, bit for bit.
    ok(&import(d, &file, &rules, "b", &[]));
    let values = |p: &Path| resilab_checkpoint::read_values(p, &resilab_checkpoint::no_probe).unwrap();
    assert_eq!(values(&d.join("a")).params, values(&d.join("b")).params);
}

/// Writes a CIFAR-10 binary batch of `records` records.
fn batch(path: &Path, records: usize) {
    let mut bytes = Vec::new();
    for i in 0..records {
        bytes.push((i % 10) as u8);
        bytes.extend((0..3072).map(|p| ((p + i) % 251) as u8));
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_cifar_import_with_a_train_size_reads_only_the_batches_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cifar = d.join("cifar-10-batches-bin");
    std::fs::create_dir(&cifar).unwrap();
    batch(&cifar.join("data_batch_1.bin"), 20);
    batch(&cifar.join("test_batch.bin"), 10);
    let text = RESNET8.replace("[data]\n", &format!("[data]\nsource = \"cifar10\"\npath = \"{}\"\n", d.display()));
    let (out, _) = ok(&import(d, &fixture("resnet8.pt"), &text, "c", &["--set", "data.train_size=16", "--set", "data.test_size=10"]));
    assert!(out.contains("imported"), "{out}");
    // More images than the batches there hold: the missing batch is named.
    let o = import(d, &fixture("resnet8.pt"), &text, "c2", &["--set", "data.train_size=30"]);
    assert_clean_error(&o, &["data_batch_2.bin"]);
}
