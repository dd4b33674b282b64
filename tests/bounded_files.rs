//! Files a configuration names are opened as regular files and read with a bound: a FIFO or
//! a device (directly or through a symlink) is refused at once, and a configuration that nests
//! a hundred thousand levels is refused before it is parsed. Each command runs under a time
//! limit (a FIFO used to block forever) and an address-space cap (`/dev/zero` used to be read
//! until the allocator gave up), and its peak memory is measured.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{assert_clean_error, output_and_peak_rss, write};

/// The wall-clock limit of one command: far above what a refusal takes.
const LIMIT_S: u64 = 20;

/// Peak resident memory allowed for a command that refuses a file before reading it, well
/// below the 1 GiB budget it runs under.
const SMALL_RSS: u64 = 256 << 20;

/// The binary under test: this build's, or the one `RESILAB_BIN` names (to run these tests
/// against another build, such as one from before the bounds).
fn binary() -> std::path::PathBuf {
    std::env::var_os("RESILAB_BIN").map_or_else(|| env!("CARGO_BIN_EXE_resilab").into(), Into::into)
}

/// Runs `resilab args` and returns its output.
fn run(args: &[&str]) -> Output {
    Command::new(binary()).args(args).env("RUST_BACKTRACE", "0").output().unwrap()
}

/// Runs `resilab args` under `RESILAB_MAX_MEMORY=1G`, killed after [`LIMIT_S`] and with its
/// address space capped at 6 GiB (so that a command reading a device without a bound fails
/// fast instead of filling the machine); returns its output, peak RSS and wall time.
fn bounded(args: &[&str]) -> (Output, u64, Duration) {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {}; exec timeout -s KILL {LIMIT_S} \"$@\"", 6 << 20))
        .arg("sh")
        .arg(binary())
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .env("RESILAB_MAX_MEMORY", "1G");
    let t = Instant::now();
    let (out, rss) = output_and_peak_rss(&mut cmd);
    (out, rss, t.elapsed())
}

/// Asserts one clean error line naming every needle, within the time limit and in little
/// memory; prints the figures.
fn refused(what: &str, (out, rss, wall): (Output, u64, Duration), needles: &[&str]) {
    eprintln!("{what}: exit {:?}, peak RSS {} MiB, {wall:.2?}", out.status.code(), rss >> 20);
    assert!(wall < Duration::from_secs(LIMIT_S), "{what}: killed after {wall:?} (blocked)");
    assert_clean_error(&out, needles);
    assert!(rss < SMALL_RSS, "{what}: peak RSS {} MiB", rss >> 20);
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

const TRAIN: &str = r#"
seed = 7

[data]
source = "SOURCE"
path = "PATH"
train_size = 64
test_size = 32

[model]
arch = "resnet"
depth = 8
width = 0.25

[train]
steps = 2
batch_size = 32

[optimizer]
kind = "sgd"
lr = 0.05
"#;

fn train(dir: &Path, source: &str, data: &Path) -> (Output, u64, Duration) {
    let text = TRAIN.replace("SOURCE", source).replace("PATH", data.to_str().unwrap());
    let cfg = write(dir, &format!("{source}.toml"), &text);
    let out = dir.join(format!("out-{source}"));
    bounded(&["train", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"])
}

#[test]
fn a_dataset_file_that_is_a_device_or_a_fifo_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let cifar = dir.path().join("cifar");
    std::fs::create_dir(&cifar).unwrap();
    std::os::unix::fs::symlink("/dev/zero", cifar.join("data_batch_1.bin")).unwrap();
    refused(
        "cifar10, data_batch_1.bin -> /dev/zero",
        train(dir.path(), "cifar10", &cifar),
        &["data.path", "data_batch_1.bin is a character device, not a regular file"],
    );
    std::fs::remove_file(cifar.join("data_batch_1.bin")).unwrap();
    mkfifo(&cifar.join("data_batch_1.bin"));
    refused("cifar10, data_batch_1.bin a FIFO", train(dir.path(), "cifar10", &cifar), &["data_batch_1.bin is a FIFO"]);

    let mnist = dir.path().join("mnist");
    std::fs::create_dir(&mnist).unwrap();
    std::os::unix::fs::symlink("/dev/zero", mnist.join("train-images-idx3-ubyte")).unwrap();
    refused("mnist, images -> /dev/zero", train(dir.path(), "mnist", &mnist), &["train-images-idx3-ubyte is a character device"]);
    std::fs::remove_file(mnist.join("train-images-idx3-ubyte")).unwrap();
    mkfifo(&mnist.join("train-images-idx3-ubyte"));
    refused("mnist, images a FIFO", train(dir.path(), "mnist", &mnist), &["train-images-idx3-ubyte is a FIFO"]);
}

#[test]
fn an_injection_sequence_that_is_a_device_or_a_fifo_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("log.jsonl");
    mkfifo(&fifo);
    let target = write(dir.path(), "model.h5", "not read: the log is refused first");
    for (name, log) in [("/dev/zero", Path::new("/dev/zero")), ("a FIFO", fifo.as_path())] {
        let text = format!(
            "injection_type: count\nfloat_precision: 32\nfirst_bit: 0\nlast_bit: 31\nuse_random_locations: true\ninjection_sequence_path: {}\n",
            log.display()
        );
        let cfg = write(dir.path(), "replay.yaml", &text);
        let out = dir.path().join("out.h5");
        let args = ["inject", "--config", cfg.to_str().unwrap(), "--file", target.to_str().unwrap(), "--output", out.to_str().unwrap()];
        let kind = if name == "a FIFO" { "is a FIFO" } else { "is a character device" };
        refused(
            &format!("inject, injection_sequence_path {name}"),
            bounded(&args),
            &["injection_sequence_path", &log.display().to_string(), kind],
        );
        assert!(!out.exists());
        // The same log given as --replay.
        let args = ["inject", "--replay", log.to_str().unwrap(), "--file", target.to_str().unwrap(), "--output", out.to_str().unwrap()];
        refused(&format!("inject --replay {name}"), bounded(&args), &["--replay", kind]);
    }
    // A configuration file that is a FIFO is refused like the files it names.
    let args = ["inject", "--config", fifo.to_str().unwrap(), "--file", target.to_str().unwrap()];
    refused("inject --config a FIFO", bounded(&args), &["--config", "is a FIFO"]);
    let out = dir.path().join("t");
    let args = ["train", "--config", "/dev/zero", "--out", out.to_str().unwrap()];
    refused("train --config /dev/zero", bounded(&args), &["--config", "/dev/zero is a character device"]);
    // The weights file `import` reads, a FIFO or /dev/zero as a .pt or .safetensors.
    let cfg = write(dir.path(), "import.toml", common::TINY);
    for name in ["weights.pt", "weights.safetensors"] {
        let file = dir.path().join(name);
        mkfifo(&file);
        let args = ["import", file.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()];
        refused(&format!("import {name} a FIFO"), bounded(&args), &[name, "is not a file"]);
    }
    let zero = dir.path().join("zero.pt");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let args = ["import", zero.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()];
    refused("import a symlink to /dev/zero", bounded(&args), &["zero.pt", "is not a file"]);
    assert!(!out.exists());
}

#[test]
fn configurations_nested_a_hundred_thousand_levels_deep_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let n = 100_000;
    let (open, close) = ("[".repeat(n), "]".repeat(n));
    let target = write(dir.path(), "model.h5", "not read: the config is refused first");
    let yamls = [
        ("flow.yaml", format!("injection_tries: 1\nlocations_to_corrupt: {open}1{close}\n")),
        ("maps.yaml", format!("injection_tries: 1\nlocations_to_corrupt: {}1{}\n", "{a: ".repeat(n), "}".repeat(n))),
    ];
    for (name, text) in yamls {
        assert!(text.len() >= 200_000);
        let cfg = write(dir.path(), name, &text);
        let t = Instant::now();
        let out = run(&["inject", "--config", cfg.to_str().unwrap(), "--file", target.to_str().unwrap()]);
        eprintln!("inject {name} ({} KB): {:.2?}", text.len() >> 10, t.elapsed());
        assert!(t.elapsed() < Duration::from_secs(5), "{name}: {:?}", t.elapsed());
        assert_clean_error(&out, &[name, "nests deeper than 64 levels at line 2"]);
    }
    let tomls = [
        ("arrays.toml", format!("seed = 1\nx = {open}1{close}\n")),
        ("tables.toml", format!("seed = 1\nx = {}1{}\n", "{a = ".repeat(n), "}".repeat(n))),
    ];
    for (name, text) in tomls {
        let cfg = write(dir.path(), name, &text);
        for args in [
            vec!["train", "--config", cfg.to_str().unwrap(), "--out", dir.path().join("t").to_str().unwrap()],
            vec!["campaign", "--config", cfg.to_str().unwrap(), "--out", dir.path().join("c").to_str().unwrap()],
            vec!["inject", "--config", cfg.to_str().unwrap(), "--file", target.to_str().unwrap()],
        ] {
            let t = Instant::now();
            let out = run(&args);
            eprintln!("{} {name}: {:.2?}", args[0], t.elapsed());
            assert!(t.elapsed() < Duration::from_secs(5), "{name}: {:?}", t.elapsed());
            assert_clean_error(&out, &[name, "nests deeper than 64 levels", "line 2"]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.len() < 1000, "{} {name}: {} bytes of error", args[0], stderr.len());
        }
    }
}
