//! Bad input gets one clear error line, a non-zero exit and no panic.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use common::{TINY, assert_clean_error, run, train_with};

#[test]
fn unknown_key() {
    let o = train_with(&TINY.replace("width = 0.25", "width = 0.25\nwidht = 2"), &[]);
    assert_clean_error(&o, &["bad.toml", "unknown field `widht`", "width"]);
}

#[test]
fn wrong_type() {
    let o = train_with(&TINY.replace("batch_size = 32", "batch_size = \"big\""), &[]);
    assert_clean_error(&o, &["bad.toml", "batch_size", "invalid type"]);
}

#[test]
fn unknown_enum_value_lists_the_allowed_ones() {
    let o = train_with(&TINY.replace("kind = \"sgd\"", "kind = \"lbfgs\""), &[]);
    assert_clean_error(&o, &["lbfgs", "sgd", "adam"]);
}

#[test]
fn missing_config_file() {
    let o = run(&["train", "--config", "/nonexistent/run.toml"]);
    assert_clean_error(&o, &["/nonexistent/run.toml"]);
}

#[test]
fn missing_dataset_path() {
    let o = train_with(&TINY.replace("source = \"synthetic\"", "source = \"cifar10\"\npath = \"/nonexistent/cifar\""), &[]);
    assert_clean_error(&o, &["data.path", "/nonexistent/cifar", "datasets/README.md"]);
    let o = train_with(&TINY.replace("source = \"synthetic\"", "source = \"mnist\""), &[]);
    assert_clean_error(&o, &["data.path is required"]);
}

#[test]
fn wrong_idx_magic() {
    let dir = tempfile::tempdir().unwrap();
    let mut img = 0x0000_0802u32.to_be_bytes().to_vec();
    for d in [1u32, 28, 28] {
        img.extend(d.to_be_bytes());
    }
    img.extend([0u8; 784]);
    std::fs::write(dir.path().join("train-images-idx3-ubyte"), &img).unwrap();
    let cfg = TINY.replace("source = \"synthetic\"", &format!("source = \"mnist\"\npath = \"{}\"", dir.path().display()));
    let o = train_with(&cfg, &[]);
    assert_clean_error(&o, &["train-images-idx3-ubyte", "wrong IDX magic"]);
}

#[test]
fn truncated_cifar_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data_batch_1.bin"), vec![1u8; 3073 * 2 + 17]).unwrap();
    let cfg = TINY.replace("source = \"synthetic\"", &format!("source = \"cifar10\"\npath = \"{}\"", dir.path().display()));
    let o = train_with(&cfg, &[]);
    assert_clean_error(&o, &["data_batch_1.bin", "truncated"]);
}

#[test]
fn bad_values_name_their_key() {
    assert_clean_error(&train_with(TINY, &["--set", "optimizer.lr=-1"]), &["optimizer.lr"]);
    assert_clean_error(&train_with(TINY, &["--set", "model.depth=9"]), &["model.depth", "6n+2"]);
    assert_clean_error(&train_with(TINY, &["--set", "data.difficulty=2"]), &["data.difficulty"]);
    assert_clean_error(&train_with(TINY, &["--set", "train.batch_size=1000"]), &["train.batch_size"]);
    assert_clean_error(&train_with(TINY, &["--set", "nokey"]), &["--set nokey", "key=value"]);
    assert_clean_error(&train_with(TINY, &["--threads", "0"]), &["--threads"]);
}

#[test]
fn wgpu_without_the_feature_says_how_to_enable_it() {
    if cfg!(feature = "wgpu") {
        return;
    }
    assert_clean_error(&train_with(TINY, &["--backend", "wgpu"]), &["--features wgpu"]);
}

#[test]
fn ndarray_without_the_feature_says_how_to_enable_it() {
    if cfg!(feature = "ndarray") {
        return;
    }
    assert_clean_error(&train_with(TINY, &["--backend", "ndarray"]), &["--features ndarray", "--backend native"]);
}

#[test]
fn tch_without_the_feature_says_how_to_enable_it() {
    if cfg!(feature = "tch") {
        return;
    }
    assert_clean_error(&train_with(TINY, &["--backend", "tch"]), &["--features tch", "scripts/with-tch.sh"]);
}
