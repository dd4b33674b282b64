//! Two writers on one directory, and outputs that are links: a second run, campaign or
//! checkpoint user fails at once naming the process that holds the directory, and no output is
//! ever written through a symbolic link. Each case starts real processes.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{TINY, assert_clean_error, resilab, run, write};

/// A training run long enough to still hold its directory while the test runs another.
fn start_long(cfg: &Path, out: &Path, extra: &[&str]) -> Child {
    let mut args =
        vec!["train", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet", "--set", "train.steps=100000"];
    args.extend_from_slice(extra);
    resilab().args(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// Waits until `dir`'s lock file names `pid`: the first process holds the directory.
fn wait_for_lock(dir: &Path, pid: u32) {
    let t = Instant::now();
    while !std::fs::read_to_string(dir.join(".resilab.lock")).is_ok_and(|s| s.contains(&format!("process {pid} "))) {
        assert!(t.elapsed() < Duration::from_secs(60), "{} was never locked by {pid}", dir.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_second_run_on_a_held_directory_fails_at_once_and_leaves_the_first_intact() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "tiny.toml", TINY);
    let out = d.path().join("out");
    let mut first = start_long(&cfg, &out, &[]);
    wait_for_lock(&out, first.id());
    let t = Instant::now();
    let second = run(&["train", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"]);
    assert!(t.elapsed() < Duration::from_secs(20), "the second run waited");
    assert_clean_error(&second, &["is in use by process", &first.id().to_string()]);
    // The first run's metrics are its own: a header and rows, no NUL bytes.
    let metrics = std::fs::read(out.join("metrics.csv")).unwrap_or_default();
    assert!(!metrics.contains(&0), "metrics.csv holds NUL bytes");
    first.kill().unwrap();
    first.wait().unwrap();
    // The lock died with its process: the directory can be used again.
    let third = run(&["train", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"]);
    assert!(third.status.success(), "{}", String::from_utf8_lossy(&third.stderr));
}

#[test]
fn two_runs_cannot_share_a_checkpoint_directory() {
    let d = tempfile::tempdir().unwrap();
    let ckpt = d.path().join("shared-checkpoints");
    let cfg = write(
        d.path(),
        "tiny.toml",
        &format!("{TINY}\n[checkpoint]\nevery_steps = 1\nkeep_last = 1\ndir = {:?}\n", ckpt.to_str().unwrap()),
    );
    let mut first = start_long(&cfg, &d.path().join("a"), &[]);
    wait_for_lock(&ckpt, first.id());
    let b = d.path().join("b");
    let second = run(&["train", "--config", cfg.to_str().unwrap(), "--out", b.to_str().unwrap(), "--quiet"]);
    assert_clean_error(&second, &["checkpoint.dir", "is in use by process"]);
    first.kill().unwrap();
    first.wait().unwrap();
}

#[test]
fn a_campaign_and_its_resume_cannot_run_at_once() {
    let d = tempfile::tempdir().unwrap();
    let text = format!(
        "[campaign]\nkind = \"train\"\nseeds = [1]\nrepetitions = 50\n\n[base]\n{}\n[grid]\n\"recovery.strategy\" = [\"none\"]\n",
        TINY.replace("[data]", "[base.data]")
            .replace("[model]", "[base.model]")
            .replace("[train]", "[base.train]")
            .replace("[optimizer]", "[base.optimizer]")
    );
    let cfg = write(d.path(), "c.toml", &text);
    let out = d.path().join("camp");
    let mut first = resilab()
        .args(["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet", "--jobs", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_lock(&out, first.id());
    let resume = run(&["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet", "--resume"]);
    assert_clean_error(&resume, &["--out", "is in use by process"]);
    first.kill().unwrap();
    first.wait().unwrap();
    let zero = run(&[
        "campaign",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        d.path().join("zero").to_str().unwrap(),
        "--quiet",
        "--timeout",
        "0",
    ]);
    assert_clean_error(&zero, &["--timeout 0", "positive"]);
}

#[test]
fn no_output_is_written_through_a_link() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "tiny.toml", TINY);
    let out = d.path().join("out");
    let ok = run(&["train", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"]);
    assert!(ok.status.success());
    for name in ["metrics.csv", "faults.jsonl", "summary.tmp", "config.resolved.tmp"] {
        let victim = d.path().join(format!("victim-{name}"));
        std::fs::write(&victim, "precious").unwrap();
        let link = out.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let again = run(&["train", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"]);
        assert_clean_error(&again, &[name, "is a symbolic link"]);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious", "{name}: the link's target was written");
        std::fs::remove_file(&link).unwrap();
    }
}

#[test]
fn campaign_and_report_files_are_never_written_through_a_link() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "nev.toml", common::NEV);
    let camp = d.path().join("c");
    assert!(run(&["campaign", "--config", cfg.to_str().unwrap(), "--out", camp.to_str().unwrap(), "--quiet"]).status.success());
    let victim = d.path().join("victim.md");
    std::fs::write(&victim, "precious").unwrap();
    let report = d.path().join("r");
    std::fs::create_dir(&report).unwrap();
    std::os::unix::fs::symlink(&victim, report.join("report.md")).unwrap();
    let o = run(&["report", camp.to_str().unwrap(), "--out", report.to_str().unwrap()]);
    assert_clean_error(&o, &["is a symbolic link"]);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    // The campaign's own record: a link planted as runs.jsonl is refused on --resume.
    std::fs::remove_file(camp.join("runs.csv")).unwrap();
    std::os::unix::fs::symlink(&victim, camp.join("runs.csv")).unwrap();
    let o = run(&["campaign", "--config", cfg.to_str().unwrap(), "--out", camp.to_str().unwrap(), "--quiet", "--resume"]);
    assert!(!o.status.success() || std::fs::read_to_string(&victim).unwrap() == "precious", "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}
