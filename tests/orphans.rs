//! No worker process outlives a campaign that fails: the campaign ends (kills and reaps) its
//! worker processes on every way out, an error's included, so that none runs on as an orphan
//! into a directory that a resumed campaign may own, and none is left as a zombie.
//!
//! The test runs in a binary of its own because it makes this process a child subreaper
//! (prctl(2)): a worker process that the campaign leaves behind, running or a zombie, becomes
//! this process's child when the campaign process exits, instead of init's, where it would be
//! reaped unseen. So the test sees every process left behind, however fast it ended.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed
#![allow(unsafe_code)] // prctl(2), kill(2) and waitpid(2)

mod common;

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{NEV, resilab, write};

/// The `/proc/PID/stat` fields after the command name: state, parent, process group, ...
fn stat(pid: i32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(text.rsplit_once(')')?.1.split_whitespace().map(String::from).collect())
}

/// The processes, zombies included, whose field `field` of [`stat`] (1: parent, 2: process
/// group) is `id`, each with its state and command line.
fn processes_with(field: usize, id: u32) -> Vec<(i32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for pid in entries.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()) {
        let Some(s) = stat(pid) else { continue };
        if s.get(field).is_some_and(|v| *v == id.to_string()) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push((pid, format!("state {}: {}", s[0], cmdline.trim())));
        }
    }
    found
}

/// The live processes whose command line names `dir` (a campaign's workers get `--dir <out>`).
fn naming(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let dir = dir.to_str().unwrap();
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            stat(pid).is_some_and(|s| s[0] != "Z") && String::from_utf8_lossy(&cmdline).split('\0').any(|a| a == dir)
        })
        .collect()
}

/// Kills and reaps the processes this process adopted, so that a failed test leaves none.
fn bury(adopted: &[(i32, String)]) {
    for &(pid, _) in adopted {
        // SAFETY: kill(2) and waitpid(2) take plain integers and a null status pointer.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
}

/// Stops a campaign during its base run with TERM to its process group, as `scancel` does, and
/// waits until every process of it is gone.
fn stopped_during_its_base_run(cfg: &Path, out: &Path) {
    let mut c = resilab();
    c.args(["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--jobs", "1", "--threads", "1"]);
    let mut child = c.arg("--quiet").process_group(0).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let start = Instant::now();
    while !out.join("logs").join("worker-0.log").exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "the campaign started no worker in a minute");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of this process.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
    child.wait().unwrap();
    while !processes_with(2, child.id()).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(90), "the stopped campaign's processes outlived it by 30 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A campaign that fails after its worker process trained the base run: the record, moved to
/// another disk and linked back by a symbolic link, is refused when the first row is written
/// (resilab writes no output through a link). The campaign exits with that error, and its
/// worker process is gone with it: neither running nor a zombie left to another parent.
#[test]
fn a_campaign_that_fails_after_its_workers_started_leaves_no_worker_process_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "orphans.toml", &NEV.replace("repetitions = 10", "repetitions = 1"));
    let out = tmp.path().join("campaign");
    stopped_during_its_base_run(&cfg, &out);
    // The user frees the disk of the bases (so the resumed campaign trains its base run again,
    // whatever the stop cut) and keeps the record on another disk, linked back.
    let _ = std::fs::remove_dir_all(out.join("bases"));
    let other = tmp.path().join("other-disk");
    std::fs::create_dir(&other).unwrap();
    let record = out.join("runs.jsonl");
    if record.exists() {
        std::fs::rename(&record, other.join("runs.jsonl")).unwrap();
    } else {
        std::fs::write(other.join("runs.jsonl"), "").unwrap();
    }
    std::os::unix::fs::symlink(other.join("runs.jsonl"), &record).unwrap();

    // SAFETY: prctl(2) with integer arguments; it changes who adopts this process's orphans.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER): {}", std::io::Error::last_os_error());
    let mut c = resilab();
    c.args(["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--jobs", "1", "--threads", "1"]);
    let o = c.args(["--quiet", "--resume"]).stdin(Stdio::null()).output().unwrap();
    // The campaign process is reaped: whatever is this process's child now, it left behind.
    let adopted = processes_with(1, std::process::id());
    let running = naming(&out);
    bury(&adopted);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("runs.jsonl is a symbolic link"), "{stderr}");
    // The failure came after a worker process had started: it trained the base run.
    let trained = std::fs::read_dir(out.join("bases")).unwrap().flatten().filter(|e| e.path().join("golden.json").is_file()).count();
    assert_eq!(trained, 1, "the resumed campaign trained no base run before it failed: {stderr}");
    assert!(adopted.is_empty(), "the failed campaign left its worker processes behind: {adopted:?}");
    assert!(running.is_empty(), "processes naming the campaign directory still run: {running:?}");
}
