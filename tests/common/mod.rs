//! Helpers for the integration tests: run the real `resilab` binary on tiny configurations.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod backends;
pub mod modules;
pub mod units;

/// The tiny run (ResNet-8 at quarter width on 16x16 synthetic images, 8 steps), shared with
/// the crates' tests and the fuzzing harness (`resilab_testkit::set` varies it by key).
/// [`Args`] builds the argument lists that [`run_args`] takes.
pub use resilab_testkit::{Args, TINY};

/// 2 flip counts x 10 repetitions of the published method on a tiny ResNet-8.
pub const NEV: &str = r#"
[campaign]
kind = "restart"
seeds = [3]
repetitions = 10
base_steps = 3
steps = 2
timeout_s = 120

[base]
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 16, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { batch_size = 32 }
optimizer = { kind = "sgd", lr = 0.05, momentum = 0.9 }

[inject]
float_precision = 32
first_bit = 0
last_bit = 8
locations_to_corrupt = ["model", "optimizer"]

[grid]
"inject.injection_tries" = [1, 30]
"#;

/// A campaign's recorded runs (runs.jsonl).
pub fn rows(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("runs.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Each run's id with the fields that do not depend on timing.
pub fn table(dir: &Path) -> BTreeMap<String, String> {
    let mut t = BTreeMap::new();
    for mut r in rows(dir) {
        let o = r.as_object_mut().unwrap();
        for &k in resilab_campaign::WALL_CLOCK_COLUMNS {
            o.remove(k);
        }
        let id = o["id"].as_str().unwrap().to_string();
        assert!(t.insert(id.clone(), serde_json::to_string(o).unwrap()).is_none(), "run {id} recorded twice in {}", dir.display());
    }
    t
}

/// The binary under test.
pub fn resilab() -> Command {
    resilab_at(env!("CARGO_BIN_EXE_resilab"))
}

/// A `resilab` binary at `bin`, run as the tests run the one under test.
pub fn resilab_at(bin: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(bin);
    c.env("RUST_BACKTRACE", "0");
    c
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write test file");
    p
}

/// Runs `resilab train` on the configuration `text` (written to `dir/<name>.toml`) into
/// `dir/<name>`, with the golden runs cached in `dir/golden-cache`; asserts it exited 0 and
/// returns its `summary.json`.
pub fn train_summary(dir: &Path, name: &str, text: &str) -> serde_json::Value {
    let cfg = write(dir, &format!("{name}.toml"), text);
    train_config(&cfg, &dir.join(name), &dir.join("golden-cache"))
}

/// Runs `resilab train --config cfg --out out --golden-dir golden`; asserts it exited 0 and
/// returns its `summary.json`.
pub fn train_config(cfg: &Path, out: &Path, golden: &Path) -> serde_json::Value {
    train_config_with(cfg, out, golden, &[])
}

/// [`train_config`] with more arguments (`--set key=value`, ...).
pub fn train_config_with(cfg: &Path, out: &Path, golden: &Path, extra: &[&str]) -> serde_json::Value {
    let o = run_args(Args::train(cfg, out).golden(golden).args(extra));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

/// Writes `text` as `dir/<name>.toml`, runs it as a campaign into `dir/<name>` (2 worker
/// processes of 1 thread, quiet, then `extra`) and asserts it succeeded; returns the directory.
pub fn finished_campaign(dir: &Path, name: &str, text: &str, extra: &[&str]) -> PathBuf {
    let cfg = write(dir, &format!("{name}.toml"), text);
    let out = dir.join(name);
    let o = run_args(Args::command("campaign", &cfg, &out).args(["--jobs", "2", "--threads", "1"]).args(extra));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// A CSV file's rows, each as column name -> text.
pub fn csv_records(path: &Path) -> Vec<BTreeMap<String, String>> {
    let mut r = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    r.records().map(|rec| header.iter().cloned().zip(rec.unwrap().iter().map(String::from)).collect()).collect()
}

/// Runs `resilab` with `args` and returns its output.
pub fn run(args: &[&str]) -> Output {
    run_args(Args::default().args(args))
}

/// Runs `resilab` with `args` built by name and returns its output.
pub fn run_args(args: Args) -> Output {
    resilab().args(args).output().expect("run resilab")
}

/// Runs `resilab train --config cfg --out out --quiet` with the extra arguments.
pub fn train_into(cfg: &Path, out: &Path, extra: &[&str]) -> Output {
    run_args(Args::train(cfg, out).args(extra))
}

/// Runs `resilab train` on `cfg_text` (written to `bad.toml` in a fresh directory) with the
/// extra arguments.
pub fn train_with(cfg_text: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "bad.toml", cfg_text);
    train_into(&cfg, &dir.path().join("out"), extra)
}

/// Asserts that a command failed cleanly: non-zero exit, one `error:` line on stderr that
/// contains every string in `needles`, and no panic.
pub fn assert_clean_error(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, got success; stderr: {stderr}");
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let error_lines: Vec<&&str> = lines.iter().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(error_lines.len(), 1, "expected one error line: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "error should mention {n:?}: {stderr}");
    }
}

/// Runs `cmd` to its end and returns its output and its peak resident memory in bytes (the
/// child's `ru_maxrss`, from `wait4`, as `/usr/bin/time -v` reports it).
#[allow(unsafe_code, clippy::zombie_processes)] // reaped by wait4, which Child cannot do
pub fn output_and_peak_rss(cmd: &mut Command) -> (Output, u64) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{ExitStatus, Stdio};
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut b = Vec::new();
        out.read_to_end(&mut b).unwrap();
        b
    });
    let stderr = std::thread::spawn(move || {
        let mut b = Vec::new();
        err.read_to_end(&mut b).unwrap();
        b
    });
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: `rusage` is plain data that wait4 fills; `status` a valid int. The child is
    // reaped here, so `child` is never waited for again (dropping it does not wait).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4 failed: {}", std::io::Error::last_os_error());
    let output = Output { status: ExitStatus::from_raw(status), stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() };
    (output, usage.ru_maxrss as u64 * 1024)
}
