//! A full disk during a campaign is the machine failing, not a result: the campaign stops with
//! a nonzero exit naming the file system, records no row for the run that met it, and
//! `--resume` runs it again once there is room. A report or a merge on a full disk fails
//! naming the cause and leaves the earlier output, or nothing. Runs on a small tmpfs, which needs root and
//! permission to mount; skipped, saying why, where that is not possible.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{NEV, assert_clean_error, rows, run, write};

/// A tmpfs mounted for the test, unmounted when dropped.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(dir: &Path, size: &str) -> Result<Self, String> {
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", dir.to_str().unwrap()])
            .output()
            .map_err(|e| e.to_string())?;
        if o.status.success() { Ok(Self(dir.to_path_buf())) } else { Err(String::from_utf8_lossy(&o.stderr).trim().to_string()) }
    }

    fn resize(&self, size: &str) {
        let o = Command::new("mount").args(["-o", &format!("remount,size={size}"), self.0.to_str().unwrap()]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_stops_the_campaign_and_resume_reruns_what_it_cut() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "nev.toml", NEV);
    // Room for the base run, not for every run's altered copy (or none: both must stop cleanly).
    for size in ["100k", "140k"] {
        let mnt = d.path().join(format!("fs-{size}"));
        std::fs::create_dir(&mnt).unwrap();
        let fs = match SmallFs::mount(&mnt, size) {
            Ok(fs) => fs,
            Err(why) => {
                eprintln!("skipped: cannot mount a small tmpfs here ({why})");
                return;
            }
        };
        let out = mnt.join("c");
        let full = run(&["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"]);
        let stderr = String::from_utf8_lossy(&full.stderr).to_string();
        assert_eq!(full.status.code(), Some(1), "{size}: {stderr}");
        assert!(stderr.contains("No space left on device") && stderr.contains("the machine, not the experiment"), "{size}: {stderr}");
        assert!(stderr.contains(&format!("the file system holding {}", out.display())), "{stderr}");
        let recorded = if out.join("runs.jsonl").exists() { rows(&out) } else { Vec::new() };
        assert!(recorded.iter().all(|r| r["status"] == "ok"), "{size}: a full disk was recorded as a result: {recorded:?}");
        assert!(recorded.len() < 20, "{size}: the disk never filled");
        fs.resize("16m");
        let resumed = run(&["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet", "--resume"]);
        assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
        let all = rows(&out);
        assert_eq!(all.len(), 20, "{size}: every run recorded once after the resume");
        assert!(all.iter().all(|r| r["status"] == "ok"), "{size}: {all:?}");
    }
}

/// Every file under `dir` (none when it does not exist) but the locks, with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return files };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            files.extend(snapshot(&p));
        } else if !p.ends_with(".resilab.lock") {
            files.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    files
}

/// The names in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    n.sort();
    n
}

/// KiB used on the file system holding `dir`.
fn used_kib(dir: &Path) -> u64 {
    let o = Command::new("df").args(["-k", "--output=used"]).arg(dir).output().unwrap();
    String::from_utf8_lossy(&o.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
}

/// Runs `resilab args` on a file system that is full; asserts it failed naming the cause once.
fn fails_full(args: &[&str]) {
    let o = run(args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {stderr}");
    assert_eq!(stderr.matches("No space left on device").count(), 1, "{args:?}: {stderr}");
    assert!(!stderr.contains("ImageError") && !stderr.contains("Custom {"), "{stderr}");
}

/// A report or a merge that meets a full disk leaves the earlier output, or nothing: never a
/// truncated plot without `report.md`, nor a campaign file without its record (which
/// `campaign --status` would read as a campaign with no runs).
#[test]
fn a_report_or_merge_on_a_full_disk_leaves_the_earlier_output_or_nothing() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "nev.toml", NEV);
    let camp = d.path().join("c");
    assert!(run(&["campaign", "--config", cfg.to_str().unwrap(), "--out", camp.to_str().unwrap(), "--quiet"]).status.success());
    let mnt = d.path().join("fs");
    std::fs::create_dir(&mnt).unwrap();
    let fs = match SmallFs::mount(&mnt, "48k") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipped: cannot mount a small tmpfs here ({why})");
            return;
        }
    };
    let (r, m) = (mnt.join("r"), mnt.join("m"));
    let (camp_s, r_s, m_s) = (camp.to_str().unwrap(), r.to_str().unwrap(), m.to_str().unwrap());
    // Nothing before: nothing after.
    fails_full(&["report", camp_s, "--out", r_s]);
    assert!(names(&mnt).is_empty(), "a report cut short left {:?}", snapshot(&mnt).keys());
    fs.resize("8k");
    fails_full(&["merge", "--out", m_s, camp_s]);
    assert!(names(&mnt).is_empty(), "a merge cut short left {:?}", snapshot(&mnt).keys());
    assert_clean_error(&run(&["campaign", "--status", m_s]), &["not a campaign directory"]);
    // An earlier report and merge: kept as they were when the next one does not fit.
    fs.resize("16m");
    assert!(run(&["report", camp_s, "--out", r_s]).status.success());
    assert!(run(&["merge", "--out", m_s, camp_s]).status.success());
    let before = snapshot(&mnt);
    assert!(before.keys().any(|p| p.ends_with("plots/nev_vs_flips.png")) && before.keys().any(|p| p.ends_with("m/runs.jsonl")));
    fs.resize(&format!("{}k", used_kib(&mnt) + 48));
    fails_full(&["report", camp_s, "--out", r_s]);
    fs.resize(&format!("{}k", used_kib(&mnt) + 8));
    fails_full(&["merge", "--out", m_s, camp_s]);
    assert_eq!(snapshot(&mnt), before, "the earlier output changed");
    assert_eq!(names(&mnt), ["m", "r"]);
    let o = run(&["campaign", "--status", m_s]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("all: 20 of 20 runs recorded"), "{o:?}");
}
