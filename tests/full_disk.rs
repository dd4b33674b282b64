//! A full disk during a campaign is the machine failing, not a result: the campaign stops with
//! a nonzero exit naming the file system, records no row for the run that met it, and
//! `--resume` runs it again once there is room. Runs on a small tmpfs, which needs root and
//! permission to mount; skipped, saying why, where that is not possible.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{NEV, rows, run, write};

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

#[test]
fn a_report_on_a_full_disk_names_the_file_and_the_cause() {
    let d = tempfile::tempdir().unwrap();
    let cfg = write(d.path(), "nev.toml", NEV);
    let camp = d.path().join("c");
    assert!(run(&["campaign", "--config", cfg.to_str().unwrap(), "--out", camp.to_str().unwrap(), "--quiet"]).status.success());
    let mnt = d.path().join("fs");
    std::fs::create_dir(&mnt).unwrap();
    let _fs = match SmallFs::mount(&mnt, "48k") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipped: cannot mount a small tmpfs here ({why})");
            return;
        }
    };
    let o = run(&["report", camp.to_str().unwrap(), "--out", mnt.join("r").to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left on device") && !stderr.contains("ImageError") && !stderr.contains("Custom {"), "{stderr}");
}
