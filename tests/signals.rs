//! A signal that stops a campaign is an interruption, never a result: `scancel`, `timeout` and
//! `kill -- -PGID` send TERM to every process of the campaign's process group, and whichever
//! process it reaches first, the run in progress is not recorded and `campaign --resume` runs
//! it again. A campaign stopped by TERM at random moments 20 times, then resumed to its end,
//! records every run once and `ok`; a HUP to one worker alone stops the campaign as an
//! interruption too.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed
#![allow(unsafe_code)] // kill(2) to a process group

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{NEV, resilab, rows, write};

/// Times the campaign is stopped by TERM to its group before it is resumed to its end.
const ROUNDS: usize = 20;

/// The tiny restart campaign of `tests/campaign.rs` with `repetitions` runs per flip count.
fn config(dir: &Path, repetitions: u64) -> std::path::PathBuf {
    write(dir, "signals.toml", &NEV.replace("repetitions = 10", &format!("repetitions = {repetitions}")))
}

/// Starts `resilab campaign` (2 worker processes of 1 thread) in a process group of its own,
/// as a batch system or `timeout` starts a job.
fn start(cfg: &Path, out: &Path, resume: bool) -> Child {
    let mut c = resilab();
    c.args(["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--jobs", "2", "--threads", "1", "--quiet"]);
    if resume {
        c.arg("--resume");
    }
    c.process_group(0).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Sends `signal` to process `pid`, or with a negative `pid` to its process group.
fn kill(pid: i32, signal: i32) {
    // SAFETY: kill(2) takes plain integers and touches no memory of this process.
    let rc = unsafe { libc::kill(pid, signal) };
    assert!(rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH), "kill({pid}, {signal}) failed");
}

/// The `/proc/PID/stat` fields after the command name: state, parent, process group, ...
fn stat(pid: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(text.rsplit_once(')')?.1.split_whitespace().map(String::from).collect())
}

/// The live (not zombie) processes whose field `field` of `stat` (1: parent, 2: group) is `id`.
fn processes_with(field: usize, id: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let s = stat(&pid.to_string())?;
            (s.first()? != "Z" && s.get(field)? == &id.to_string()).then_some(pid)
        })
        .collect()
}

/// Waits for `child` to end and for the rest of its process group (the workers it left) to be
/// gone, as a batch system does before it starts the job again; returns its exit status and
/// standard error.
fn reap(mut child: Child) -> (ExitStatus, String) {
    use std::io::Read as _;
    let pgid = child.id();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    let start = Instant::now();
    while !processes_with(2, pgid).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "the campaign's workers outlived it by 30 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    (status, err)
}

/// Whether `status` is how an interrupted campaign ends: by the signal, or with 128 + it.
fn ended_by(status: ExitStatus, signal: i32) -> bool {
    status.signal() == Some(signal) || status.code() == Some(128 + signal)
}

/// Rows of `runs.jsonl` per grid index, and the statuses of those rows.
fn census(out: &Path) -> (BTreeMap<u64, usize>, BTreeMap<String, usize>) {
    let (mut per_index, mut statuses) = (BTreeMap::new(), BTreeMap::new());
    if !out.join("runs.jsonl").exists() {
        return (per_index, statuses);
    }
    for r in rows(out) {
        *per_index.entry(r["index"].as_u64().unwrap()).or_default() += 1;
        *statuses.entry(r["status"].as_str().unwrap().to_string()).or_default() += 1;
    }
    (per_index, statuses)
}

/// splitmix64: the moments of the signals, the same on every machine.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn term_to_the_process_group_at_random_moments_records_nothing_and_resume_finishes_every_run_ok() {
    let tmp = tempfile::tempdir().unwrap();
    let repetitions = 80;
    let cfg = config(tmp.path(), repetitions);
    let out = tmp.path().join("campaign");
    let mut rng = 61;
    let started = Instant::now();
    let mut interrupted = 0;
    let mut log = Vec::new();
    for round in 0..ROUNDS {
        let child = start(&cfg, &out, round > 0);
        let pgid = child.id() as i32;
        // 150-700 ms: from before the first run starts to a few runs in (a calm 2-core machine
        // records about 14 runs a second once the workers are up), so that the grid of 160 runs
        // outlasts the 20 rounds on a fast machine too.
        let wait = Duration::from_millis(150 + next(&mut rng) % 550);
        std::thread::sleep(wait);
        kill(-pgid, libc::SIGTERM);
        let (status, err) = reap(child);
        let (per_index, statuses) = census(&out);
        log.push(format!("round {round}: TERM after {wait:?}: {status}; {} rows {statuses:?}", per_index.values().sum::<usize>()));
        if status.success() {
            break; // finished before the signal
        }
        interrupted += 1;
        assert!(ended_by(status, libc::SIGTERM), "round {round}: not an interrupted exit: {status}\n{err}\n{}", log.join("\n"));
        assert!(!err.contains("panicked"), "round {round}: {err}");
    }
    let (status, err) = reap(start(&cfg, &out, true));
    assert!(status.success(), "the last resume failed: {status}\n{err}\n{}", log.join("\n"));
    let (per_index, statuses) = census(&out);
    let runs = 2 * repetitions as usize;
    let twice: Vec<&u64> = per_index.iter().filter(|(_, n)| **n > 1).map(|(i, _)| i).collect();
    assert!(twice.is_empty(), "grid indices recorded more than once: {twice:?}\n{}", log.join("\n"));
    assert_eq!(per_index.len(), runs, "runs lost: {} of {runs} recorded\n{}", per_index.len(), log.join("\n"));
    assert_eq!(statuses.get("ok"), Some(&runs), "a signal was recorded as a result: {statuses:?}\n{}", log.join("\n"));
    assert!(interrupted >= ROUNDS / 2, "the campaign finished after {interrupted} interruptions; make it longer\n{}", log.join("\n"));
    eprintln!("{} interruptions, {:?} in all\n{}", interrupted, started.elapsed(), log.join("\n"));
}

#[test]
fn hup_to_one_worker_alone_stops_the_campaign_as_an_interruption_and_records_nothing_for_its_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 40);
    let out = tmp.path().join("campaign");
    let child = start(&cfg, &out, false);
    let parent = child.id();
    // Once runs are being recorded, a worker is busy with a run: hang up on it alone.
    let start_t = Instant::now();
    while census(&out).0.len() < 2 {
        assert!(start_t.elapsed() < Duration::from_secs(120), "no runs recorded in 120 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let workers = processes_with(1, parent);
    assert!(!workers.is_empty(), "no worker processes of {parent}");
    kill(workers[0], libc::SIGHUP);
    let (status, err) = reap(child);
    assert!(ended_by(status, libc::SIGHUP), "not an interrupted exit: {status}\n{err}");
    assert!(err.contains("interrupted") && err.contains("SIGHUP") && err.contains("--resume"), "{err}");
    let (per_index, statuses) = census(&out);
    assert!(per_index.len() < 80, "the campaign finished before the signal");
    assert_eq!(statuses.get("ok"), Some(&per_index.len()), "{statuses:?}");
    // The stopped campaign resumes to its end.
    let (status, err) = reap(start(&cfg, &out, true));
    assert!(status.success(), "{status}\n{err}");
    let (per_index, statuses) = census(&out);
    assert!(per_index.len() == 80 && per_index.values().all(|n| *n == 1), "{per_index:?}");
    assert_eq!(statuses.get("ok"), Some(&80), "{statuses:?}");
}
