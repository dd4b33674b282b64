//! The campaign's parent process: prepares the campaign directory, hands runs to worker
//! processes, kills runs that pass the timeout, records crashes, stops at an interruption
//! (a worker ended by TERM, INT or HUP: [`crate::ending`]), and appends each finished run to
//! the record. Resuming reads the record and skips what it holds.

mod pool;
mod schedule;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::meta::{Meta, read_meta, shard_text};
use crate::spec::{Campaign, Kind};
use crate::store::{Appender, read_rows, write_csv};
use crate::work::{Job, Reply, base_dir};
use crate::{CAMPAIGN_FILE, Error, Metrics, RUNS_CSV, RUNS_JSONL, Result, Row, Status};
use pool::Pool;
use schedule::{Action, Answer, Event, Scheduler};

/// How to carry out a campaign.
pub struct Options {
    /// The campaign directory.
    pub out: PathBuf,
    /// Worker processes.
    pub jobs: usize,
    /// `(i, n)`: run only the runs whose index is `i` modulo `n`.
    pub shard: Option<(u64, u64)>,
    /// Continue a campaign already in `out`.
    pub resume: bool,
    /// The program and arguments that start a worker process; `--dir <out>` is appended.
    pub worker: Vec<OsString>,
    /// Show a progress bar.
    pub progress: bool,
    /// Overrides the campaign's `timeout_s`.
    pub timeout_s: Option<f64>,
    /// Backend and device, recorded; a campaign resumes only on the same.
    pub platform: String,
    /// The code revision of the binary that starts the campaign (`git describe`), recorded in
    /// `campaign.json` so that a published table names what it ran on.
    pub revision: String,
}

/// What a campaign did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    /// Runs in this shard of the grid.
    pub total: u64,
    /// Already recorded when it started (resume).
    pub skipped: u64,
    /// Recorded now.
    pub done: u64,
    /// Of those, not `ok`.
    pub failed: u64,
    /// Count per status of the runs recorded now.
    pub by_status: BTreeMap<String, u64>,
    /// Base (or golden) runs trained in this invocation before the runs.
    pub bases: u64,
    /// Seconds from the start until the first run was handed out: opening the directory and
    /// training those base runs (wall clock, part of `wall_s`).
    pub bases_s: f64,
    /// Seconds.
    pub wall_s: f64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// A campaign directory that exists may be continued only with `--resume`, by the same
/// campaign, on the same platform, as the same shard.
fn check_resumed(campaign: &Campaign, opts: &Options) -> Result<()> {
    let out = &opts.out;
    let file = out.join(CAMPAIGN_FILE);
    if !opts.resume {
        return Err(Error::Config(format!(
            "{} already holds a campaign: pass --resume to continue it, or choose another --out",
            out.display()
        )));
    }
    let old = std::fs::read_to_string(&file).map_err(io(&file))?;
    if old != campaign.text {
        return Err(Error::Config(format!(
            "{} was started with a different campaign (settings, grid or overrides differ); resume it with the same file and --set options, or choose another --out",
            out.display()
        )));
    }
    let meta = read_meta(out);
    if let Some(meta) = &meta
        && meta.platform != opts.platform
    {
        return Err(Error::Config(format!(
            "{} was run on {}, not {}: its bases and golden runs would not match",
            out.display(),
            meta.platform,
            opts.platform
        )));
    }
    if let Some(recorded) = meta.as_ref().and_then(Meta::shard)
        && recorded != opts.shard
    {
        return Err(Error::Config(format!(
            "{} holds shard {} of its campaign, not {}: resume it with --shard {} (a Slurm array task resubmitted on its own needs RESILAB_SHARDS, see configs/slurm/campaign-array.sh)",
            out.display(),
            shard_text(recorded),
            shard_text(opts.shard),
            shard_text(recorded)
        )));
    }
    Ok(())
}

/// Creates or reopens the campaign directory; returns the rows already recorded.
fn prepare_dir(campaign: &Campaign, opts: &Options) -> Result<Vec<Row>> {
    let out = &opts.out;
    let file = out.join(CAMPAIGN_FILE);
    let meta_path = out.join("campaign.json");
    if file.is_file() {
        check_resumed(campaign, opts)?;
    } else {
        // A new campaign starts only in a new or empty directory: its clean-up (tmp/, stale
        // bases) must never reach files that are not the campaign's.
        if let Ok(mut entries) = std::fs::read_dir(out)
            && let Some(e) = entries
                .find(|e| !e.as_ref().is_ok_and(|e| e.file_name() == resilab_runner::files::LOCK_FILE || e.file_name() == "campaign.tmp"))
        {
            let first = e.map_or_else(|_| String::from("?"), |e| e.path().display().to_string());
            return Err(Error::Config(format!(
                "{} is not empty (it holds {first}, ...) and holds no campaign: a new campaign needs a new or empty --out",
                out.display()
            )));
        }
        std::fs::create_dir_all(out).map_err(io(out))?;
        resilab_runner::write_atomic(&file, campaign.text.as_bytes())?;
        let meta = Meta {
            platform: opts.platform.clone(),
            started: resilab_runner::utc_stamp(),
            revision: opts.revision.clone(),
            shard: Some(shard_text(opts.shard)),
            all_reduce_buckets: Some(resilab_train::REDUCE_PLAN_REVISION),
        };
        resilab_runner::write_atomic(
            &meta_path,
            &serde_json::to_vec_pretty(&meta).map_err(|source| Error::Json { what: meta_path.display().to_string(), source })?,
        )?;
    }
    // Leftovers of runs and bases cut short.
    let tmp = out.join("tmp");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    for root in [out.join("bases"), out.join("golden")] {
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') && name.ends_with(".tmp") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    std::fs::create_dir_all(out.join("logs")).map_err(io(out))?;
    let rows = crate::csv_record::resume_record(out, campaign)?;
    write_csv(&out.join(RUNS_CSV), &campaign.axis_keys(), campaign.settings.kind, &rows)?;
    Ok(rows)
}

/// Whether the base (or golden run) of `spec` is ready in `out`.
fn base_ready(campaign: &Campaign, out: &Path, spec: &crate::RunSpec, platform: &str) -> bool {
    match campaign.settings.kind {
        Kind::Train => out.join("golden").join(resilab_runner::golden::key(&spec.config, platform)).join("summary.json").is_file(),
        _ => base_dir(out, &spec.base_key).join("golden.json").is_file(),
    }
}

fn check_shard(shard: Option<(u64, u64)>) -> Result<()> {
    match shard {
        Some((i, n)) if n == 0 || i >= n => Err(Error::Config(format!("--shard {i}/{n}: expected I/N with 0 <= I < N"))),
        _ => Ok(()),
    }
}

/// The runs of this shard (`(i, n)`: index `i` modulo `n`) whose ids are not in `done`, and
/// how many runs the shard has in all.
pub(crate) fn pending(campaign: &Campaign, shard: Option<(u64, u64)>, done: &HashSet<String>) -> Result<(u64, Vec<crate::RunSpec>)> {
    check_shard(shard)?;
    let mut total = 0;
    let mut todo = Vec::new();
    for i in (0..campaign.len()).filter(|&i| shard.is_none_or(|(s, n)| i % n == s)) {
        total += 1;
        let spec = campaign.run(i)?;
        if !done.contains(&spec.id) {
            todo.push(spec);
        }
    }
    Ok((total, todo))
}

/// The first run of each base (or golden run) among `todo` that is not ready yet.
pub(crate) fn bases_to_prepare<'a>(campaign: &Campaign, out: &Path, todo: &'a [crate::RunSpec], platform: &str) -> Vec<&'a crate::RunSpec> {
    let mut seen = HashSet::new();
    todo.iter().filter(|s| seen.insert(s.base_key.as_str()) && !base_ready(campaign, out, s, platform)).collect()
}

/// Runs `jobs` through the pool; `finish` gets each answer (made up for crashes and
/// timeouts). Returns when every job has an answer. The decisions are the scheduler's; this
/// carries them out and feeds it the pool's events.
fn drive(pool: &mut Pool, jobs: Vec<Job>, timeout: impl Fn(&Job) -> Duration, mut finish: impl FnMut(Reply) -> Result<()>) -> Result<()> {
    let mut plan = Scheduler::new(pool.len(), jobs, timeout);
    let mut event = Event::Tick;
    loop {
        for action in plan.on(event, Instant::now()) {
            match action {
                Action::Start(i) => pool.spawn(i)?,
                Action::Send(i, job) => pool.send(i, job),
                Action::Kill(i) => pool.kill(i),
                Action::Record(answer) => finish(reply_of(answer))?,
                Action::Stop(stop) => return Err(stop.into()),
                Action::Finish => return Ok(()),
            }
        }
        event = pool.next(plan.wait(Instant::now()))?;
    }
}

/// The reply recorded for an answer: the worker's own, or a crash or a timeout it could not give.
fn reply_of(answer: Answer<Reply>) -> Reply {
    let (job, status, message) = match answer {
        Answer::Replied(reply) => return reply,
        Answer::Crashed { job, message } => (job, Status::Crashed, message),
        Answer::TimedOut { job, message } => (job, Status::Timeout, message),
    };
    Reply { job, status, message: Some(message), metrics: Metrics::default() }
}

/// Carries out the campaign (or this shard of it) in `opts.out`.
pub fn execute(campaign: &Campaign, opts: &Options) -> Result<Outcome> {
    let start = Instant::now();
    check_options(opts)?;
    // Held until the campaign ends: a second campaign (or a --resume) on the directory fails
    // at once instead of interleaving rows.
    let _lock = resilab_runner::files::lock_dir(&opts.out, "--out")?;
    let recorded = prepare_dir(campaign, opts)?;
    let done: HashSet<String> = recorded.iter().map(|r| r.id.clone()).collect();
    let (total, todo) = pending(campaign, opts.shard, &done)?;
    let outcome = Outcome { total, skipped: total - todo.len() as u64, ..Outcome::default() };
    let preps: Vec<Job> =
        bases_to_prepare(campaign, &opts.out, &todo, &opts.platform).iter().map(|s| Job::Prep { index: s.index }).collect();
    let timeout = Duration::from_secs_f64(opts.timeout_s.unwrap_or(campaign.settings.timeout_s));
    let timeout_of = |j: &Job| match j {
        Job::Prep { .. } => timeout * 10,
        Job::Run { .. } => timeout,
    };
    // Declared after the lock, so dropped before it: on every way out of this function, an
    // error's included, the pool ends its processes before another campaign may take the
    // directory.
    let mut pool = Pool::new(opts.jobs.min(todo.len().max(1)), &opts.worker, &opts.out);
    let (bar, log_lines) = progress(opts, todo.len());
    let specs: HashMap<u64, crate::RunSpec> = todo.iter().map(|s| (s.index, s.clone())).collect();
    if !preps.is_empty() {
        bar.set_message(format!("training {} base run(s)", preps.len()));
    }
    let bases = preps.len() as u64;
    let base_failures = run_bases(&mut pool, preps, &timeout_of, campaign, &specs, &opts.out)?;
    let outcome = Outcome { bases, bases_s: start.elapsed().as_secs_f64(), ..outcome };
    bar.set_message("");
    let appender = Appender::open(&opts.out, campaign.axis_keys(), campaign.settings.kind)?;
    let mut recorder = Recorder { appender, bar, log_lines, todo: todo.len(), outcome };
    let mut runs = Vec::new();
    for s in &todo {
        match base_failures.get(&s.base_key) {
            Some(m) => recorder.record(s, Status::BaseFailed, Some(m.clone()), Metrics::default())?,
            None => runs.push(Job::Run { index: s.index }),
        }
    }
    drive(&mut pool, runs, timeout_of, |reply| {
        stop_for_machine(&reply, &opts.out)?;
        let Job::Run { index } = reply.job else { return Ok(()) };
        let Some(spec) = specs.get(&index) else { return Ok(()) };
        recorder.record(spec, reply.status, reply.message, reply.metrics)
    })?;
    drop(pool);
    write_fault_log(campaign, &opts.out)?;
    let Recorder { bar, mut outcome, .. } = recorder;
    bar.finish();
    outcome.wall_s = start.elapsed().as_secs_f64();
    Ok(outcome)
}

/// Appends each finished run to the record, counts it, and shows it.
struct Recorder {
    appender: Appender,
    bar: ProgressBar,
    /// One line per run on standard error ([`log_line`]).
    log_lines: bool,
    /// Runs to do in all.
    todo: usize,
    outcome: Outcome,
}

impl Recorder {
    fn record(&mut self, spec: &crate::RunSpec, status: Status, message: Option<String>, metrics: Metrics) -> Result<()> {
        let row = Row {
            id: spec.id.clone(),
            index: spec.index,
            coords: spec.coords.iter().cloned().collect(),
            seed: spec.seed,
            rep: spec.rep,
            status,
            message,
            metrics,
        };
        self.appender.append(&row)?;
        let outcome = &mut self.outcome;
        outcome.done += 1;
        if status != Status::Ok {
            outcome.failed += 1;
            self.bar.set_message(format!("{} not ok", outcome.failed));
        }
        *outcome.by_status.entry(status.name().to_string()).or_default() += 1;
        self.bar.inc(1);
        if self.log_lines {
            eprintln!("{}", log_line(&row, outcome.done, self.todo));
        }
        Ok(())
    }
}

/// A `train` campaign's `faults.csv`: the fault logs of every run recorded so far.
fn write_fault_log(campaign: &Campaign, out: &Path) -> Result<()> {
    if campaign.settings.kind != crate::Kind::Train {
        return Ok(());
    }
    let rows = read_rows(&out.join(RUNS_JSONL), campaign, false)?;
    let bytes = crate::fault_log::faults_csv(out, &rows)?;
    Ok(resilab_runner::write_atomic(&out.join(crate::FAULTS_CSV), &bytes)?)
}

/// The progress bar of a campaign on a terminal; into a log file (a Slurm job's output) a bar
/// would be invisible or garbage, so there the bar is hidden and `true` asks for one line per
/// finished run instead ([`log_line`]).
fn progress(opts: &Options, todo: usize) -> (ProgressBar, bool) {
    let log_lines = opts.progress && !std::io::stderr().is_terminal();
    let bar = if opts.progress && !log_lines { ProgressBar::new(todo as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs ({per_sec}, eta {eta}) {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    (bar, log_lines)
}

/// The line a campaign writes to a log for each finished run: progress, id, grid index,
/// status, and the first line of a failed run's message.
fn log_line(row: &Row, done: u64, todo: usize) -> String {
    let stamp = resilab_runner::utc_stamp();
    let mut line = format!("resilab: {stamp} [{done}/{todo}] run {} (grid index {}): {}", row.id, row.index, row.status.name());
    if let Some(m) = row.message.as_deref().and_then(|m| m.lines().next()).filter(|_| row.status != Status::Ok) {
        line.push_str(": ");
        // The message may quote a label or a file's names: no control character reaches the terminal.
        line.push_str(&resilab_text::terminal(m));
    }
    line
}

/// `--jobs` and `--timeout` as given, and the shard.
fn check_options(opts: &Options) -> Result<()> {
    if opts.jobs == 0 {
        return Err(Error::Config("--jobs must be at least 1".into()));
    }
    check_shard(opts.shard)?;
    if let Some(t) = opts.timeout_s.filter(|t| !(t.is_finite() && *t > 0.0)) {
        return Err(Error::Config(format!("--timeout {t}: a run's time limit must be a positive number of seconds")));
    }
    Ok(())
}

/// Trains the base (or golden) runs `preps`; returns, by base key, why those that failed did.
fn run_bases(
    pool: &mut Pool,
    preps: Vec<Job>,
    timeout_of: &dyn Fn(&Job) -> Duration,
    campaign: &Campaign,
    specs: &HashMap<u64, crate::RunSpec>,
    out: &Path,
) -> Result<HashMap<String, String>> {
    let mut failures = HashMap::new();
    if preps.is_empty() {
        return Ok(failures);
    }
    drive(pool, preps, timeout_of, |reply| {
        stop_for_machine(&reply, out)?;
        if reply.status != Status::Ok
            && let Job::Prep { index } = reply.job
            && let Some(s) = specs.get(&index)
        {
            let what = if campaign.settings.kind == Kind::Train { "golden run" } else { "base run" };
            failures.insert(s.base_key.clone(), format!("{what} {}: {}", reply.status.name(), reply.message.unwrap_or_default()));
        }
        Ok(())
    })?;
    Ok(failures)
}

/// Stops the campaign when a run failed because of the machine (a full or read-only file
/// system, an I/O error): the run is not recorded, so `--resume` runs it again.
fn stop_for_machine(reply: &Reply, out: &Path) -> Result<()> {
    if reply.status != Status::Infrastructure {
        return Ok(());
    }
    let free = fs4::available_space(out).map_or_else(|_| "unknown".to_string(), |b| format!("{b} bytes"));
    Err(Error::Machine { message: reply.message.as_deref().unwrap_or("an infrastructure error").to_string(), out: out.to_path_buf(), free })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed
    use super::*;
    use crate::{READY_LINE, REPLY_PREFIX};

    /// A pool of `n` shell workers that speak the protocol: ready, then per job line, run 0
    /// answers ok, run 1 hangs, run 2 dies (exit 3), run 4 is ended by TERM, any other run
    /// answers ok after a moment.
    fn pool(dir: &Path, n: usize) -> Pool {
        let ok = |index: u64| {
            let reply = Reply { job: Job::Run { index }, status: Status::Ok, message: None, metrics: Metrics::default() };
            format!("{REPLY_PREFIX}{}", serde_json::to_string(&reply).unwrap())
        };
        let script = format!(
            "echo {READY_LINE}; while read -r line; do case \"$line\" in \
             *'\"index\":0'*) echo '{}';; *'\"index\":1'*) sleep 30;; \
             *'\"index\":2'*) echo 'about to die' >&2; exit 3;; *'\"index\":4'*) kill -TERM $$;; \
             *) sleep 0.1; echo '{}';; esac; done",
            ok(0),
            ok(3)
        );
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        Pool::new(n, &["/bin/sh".into(), "-c".into(), script.into(), "sh".into()], dir)
    }

    #[test]
    fn a_run_failed_by_the_machine_stops_the_campaign_as_a_machine_error() {
        let dir = tempfile::tempdir().unwrap();
        let reply = |status| Reply {
            job: Job::Run { index: 3 },
            status,
            message: Some("No space left on device".into()),
            metrics: Metrics::default(),
        };
        assert!(stop_for_machine(&reply(Status::Ok), dir.path()).is_ok());
        match stop_for_machine(&reply(Status::Infrastructure), dir.path()) {
            Err(e @ Error::Machine { .. }) => {
                let text = e.to_string();
                assert!(text.starts_with("the campaign stopped: No space left on device (the file system holding"), "{text}");
                assert!(text.contains("`campaign --resume` runs it again"), "{text}");
            }
            other => panic!("not a machine error: {other:?}"),
        }
    }

    fn runs(indices: &[u64]) -> Vec<Job> {
        indices.iter().map(|&index| Job::Run { index }).collect()
    }

    #[test]
    fn a_hung_run_is_killed_at_its_timeout_and_a_dead_worker_is_a_crash_with_its_log_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = pool(dir.path(), 2);
        let mut replies = Vec::new();
        let start = Instant::now();
        // The hung run's timeout is 1 s; the others have a minute, so a loaded machine fails none.
        let timeout = |j: &Job| Duration::from_secs(if *j == (Job::Run { index: 1 }) { 1 } else { 60 });
        drive(&mut p, runs(&[0, 1, 2, 3]), timeout, |r| {
            replies.push(r);
            Ok(())
        })
        .unwrap();
        drop(p);
        assert!(start.elapsed() < Duration::from_secs(15), "the hung run held the pool: {:?}", start.elapsed());
        replies.sort_by_key(|r| match r.job {
            Job::Run { index } | Job::Prep { index } => index,
        });
        let status: Vec<Status> = replies.iter().map(|r| r.status).collect();
        assert_eq!(status, [Status::Ok, Status::Timeout, Status::Crashed, Status::Ok]);
        assert_eq!(replies[1].message.as_deref(), Some("killed after 1 s (timeout)"));
        let crash = replies[2].message.as_deref().unwrap();
        assert!(crash.contains("exit status 3") && crash.ends_with("about to die"), "{crash}");
    }

    #[test]
    fn a_worker_ended_by_term_interrupts_the_drive_and_its_run_is_never_answered() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = pool(dir.path(), 1);
        let mut answered = Vec::new();
        let e = drive(
            &mut p,
            runs(&[0, 4, 3]),
            |_| Duration::from_secs(60),
            |r| {
                answered.push((r.job, r.status));
                Ok(())
            },
        )
        .unwrap_err();
        drop(p);
        assert!(matches!(&e, Error::Interrupted { signal: 15, worker: 0, during } if during == "the run of grid index 4"), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("ended by SIGTERM") && text.contains("`campaign --resume` runs it again"), "{text}");
        // Run 0 was answered before; run 4 is not recorded, and run 3 was never handed out.
        assert_eq!(answered, [(Job::Run { index: 0 }, Status::Ok)]);
    }

    #[test]
    fn a_reply_the_campaign_refuses_stops_the_drive_and_dropping_the_pool_kills_and_reaps_its_processes() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = pool(dir.path(), 2);
        let start = Instant::now();
        // Run 1 hangs: its worker would run on for half a minute if nobody ended it.
        let e = drive(&mut p, runs(&[0, 1, 3, 3]), |_| Duration::from_secs(60), |_| Err(Error::Config("machine full".into())));
        assert_eq!(e.unwrap_err().to_string(), "machine full");
        let pids = p.pids();
        assert_eq!(pids.len(), 2, "both workers' processes are still the pool's");
        drop(p);
        // Reaped: no entry at all, not even a zombie's.
        for pid in pids {
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "worker process {pid} outlived its pool");
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
    }

    #[test]
    fn a_worker_that_dies_before_it_is_ready_is_an_error_naming_its_log() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let script = "echo 'no such campaign' >&2; exit 2";
        let mut p = Pool::new(1, &["/bin/sh".into(), "-c".into(), script.into(), "sh".into()], dir.path());
        let e = drive(&mut p, runs(&[0]), |_| Duration::from_secs(60), |_| Ok(())).unwrap_err().to_string();
        assert!(e.starts_with("campaign worker: a worker process failed to start (exit status 2): no such campaign (see "), "{e}");
        assert!(e.contains("worker-0.log"), "{e}");
    }

    #[test]
    fn a_worker_that_cannot_start_names_the_program_and_keeps_its_cause() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let mut p = Pool::new(1, &["/nonexistent/resilab".into()], dir.path());
        let e = drive(&mut p, runs(&[0]), |_| Duration::from_secs(60), |_| Ok(())).unwrap_err();
        assert!(matches!(&e, Error::WorkerStart { program, .. } if program == Path::new("/nonexistent/resilab")), "{e:?}");
        // The cause is the error's source, printed once by the binary's `{:#}`.
        let source = std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default();
        assert!(source.contains("No such file"), "{source}");
        assert!(!e.to_string().contains("No such file"), "{e}");
    }
}
