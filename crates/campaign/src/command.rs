//! What `resilab campaign` and its worker processes need besides the campaign itself: the
//! `--shard` and `--jobs` policies, the worker command line and protocol loop, and the lines
//! the command prints.

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::Path;

use crate::{Campaign, Error, Estimate, Job, Outcome, READY_LINE, REPLY_PREFIX, Result, Worker};

/// How many worker processes of `threads` threads to run: `jobs` when given, else as many as
/// the cores hold. More threads in all than cores is an error unless `oversubscribe`.
pub fn jobs_for(threads: usize, jobs: Option<usize>, oversubscribe: bool) -> Result<usize> {
    if threads == 0 {
        return Err(Error::Config("--threads must be at least 1".into()));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = jobs.unwrap_or((cores / threads).max(1));
    if jobs == 0 {
        return Err(Error::Config("--jobs must be at least 1".into()));
    }
    if jobs * threads > cores && !oversubscribe {
        return Err(Error::Config(format!(
            "--jobs {jobs} x --threads {threads} = {} threads on {cores} cores would oversubscribe them (each slows the others); lower --jobs, or pass --oversubscribe",
            jobs * threads
        )));
    }
    Ok(jobs)
}

/// The command line that starts a worker process: this executable's hidden
/// `__campaign-worker` command on the same backend, with `--no-shortcuts` unless `shortcuts`.
pub fn worker_command(threads: usize, backend: &str, wgpu_device: &str, shortcuts: bool) -> Result<Vec<OsString>> {
    let exe = std::env::current_exe()
        .map_err(|source| Error::WorkerStart { program: std::path::PathBuf::from("resilab (this executable)"), source })?;
    let threads = threads.to_string();
    let mut args = vec!["__campaign-worker", "--threads", &threads, "--backend", backend, "--wgpu-device", wgpu_device];
    if !shortcuts {
        args.push("--no-shortcuts");
    }
    Ok(std::iter::once(exe.into_os_string()).chain(args.iter().map(OsString::from)).collect())
}

/// A worker process's life: says it is ready, then answers each job line read from stdin with
/// one reply line on stdout, until stdin ends. Jobs are read on their own thread so that the end
/// of stdin (the campaign process closed it or died, even by SIGKILL) ends the process at once,
/// mid-run included: an orphaned worker must not go on writing into a campaign directory that a
/// resumed campaign now owns. A worker that received TERM, INT or HUP replies nothing more (what
/// its run met while its temporary directories were removed under it is no result): the
/// signal's handler ends it, and the campaign process takes that end for an interruption.
pub fn serve(worker: &mut Worker<'_>) -> Result<()> {
    let io = |e: std::io::Error| Error::Io { path: "<stdout>".into(), source: e };
    let stdout = std::io::stdout();
    writeln!(stdout.lock(), "{READY_LINE}").map_err(io)?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(l) = line else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
        std::process::exit(0);
    });
    for line in rx.iter().filter(|l| !l.trim().is_empty()) {
        let job: Job = serde_json::from_str(&line).map_err(|source| Error::Json { what: format!("job line {line}"), source })?;
        let reply = serde_json::to_string(&worker.handle(job)).map_err(|source| Error::Json { what: "a reply".into(), source })?;
        if resilab_runner::interrupt::received().is_some() {
            loop {
                std::thread::park(); // until the signal's handler ends the process
            }
        }
        let mut out = stdout.lock();
        writeln!(out, "{REPLY_PREFIX}{reply}").map_err(io)?;
        out.flush().map_err(io)?;
    }
    Ok(())
}

/// Seconds as a person reads them: seconds below two minutes, minutes below two hours, hours.
pub fn human_duration(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

impl Estimate {
    /// The dry run's report: the grid, this shard's work, each set-up's measured costs and the
    /// estimate for `jobs` processes of `threads` threads.
    pub fn text(&self, campaign: &Campaign, threads: usize, jobs: usize) -> String {
        let mut lines = vec![
            format!("campaign     {} ({}): {} runs in the grid", campaign.name(), campaign.settings.kind.name(), campaign.len()),
            format!("this shard   {} runs, {} to do, {} base run(s) to train first", self.runs, self.todo, self.bases),
        ];
        for k in &self.setups {
            lines.push(format!(
                "measured     {}: {:.1} ms per training step (+{:.1} ms state scan), {:.1} ms per evaluation, {:.1} ms to build, {:.1} / {:.1} ms to write / read a checkpoint ({threads} thread(s))",
                k.label,
                k.step_s * 1e3,
                k.scan_s * 1e3,
                k.eval_s * 1e3,
                k.build_s * 1e3,
                k.save_s * 1e3,
                k.load_s * 1e3,
            ));
        }
        lines.push(format!("estimate     {} with {jobs} worker process(es) of {threads} thread(s)", human_duration(self.eta_s)));
        if self.eta_min_s < self.eta_s {
            lines.push(format!(
                "             (as little as {} if every run's state held a NaN/Inf after its first step: such runs stop there)",
                human_duration(self.eta_min_s)
            ));
        }
        lines.join("\n")
    }
}

impl Outcome {
    /// One line: the runs recorded now by status, before, in the shard, the time, and where
    /// `runs.csv` is in `out`.
    pub fn text(&self, out: &Path) -> String {
        let statuses: Vec<String> = self.by_status.iter().map(|(k, v)| format!("{v} {k}")).collect();
        format!(
            "{} runs recorded now ({}), {} recorded before, {} in this shard; {:.1} s ({} base run(s) first: {:.1} s) -> {}",
            self.done,
            if statuses.is_empty() { "none".to_string() } else { statuses.join(", ") },
            self.skipped,
            self.total,
            self.wall_s,
            self.bases,
            self.bases_s,
            out.join(crate::RUNS_CSV).display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::parse_shard;

    #[test]
    fn shards_and_durations_read_as_documented() {
        assert_eq!(parse_shard("1/4").ok(), Some((1, 4)));
        assert_eq!(parse_shard(" 0 / 1 ").ok(), Some((0, 1)));
        for bad in ["4/4", "1/0", "x/2", "3"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
        // A lone resubmitted array task is told which variable to set.
        let lone = parse_shard("3/1").unwrap_err().to_string();
        assert!(lone.contains("shard 3 of 1 does not exist") && lone.contains("set RESILAB_SHARDS"), "{lone}");
        assert_eq!(human_duration(59.4), "59 s");
        assert_eq!(human_duration(150.0), "2.5 min");
        assert_eq!(human_duration(9000.0), "2.5 h");
        assert!(jobs_for(0, None, false).is_err());
        assert!(jobs_for(1, Some(0), false).is_err());
        assert_eq!(jobs_for(1, Some(1), false).ok(), Some(1));
        assert!(jobs_for(1, Some(100_000), false).is_err());
        assert_eq!(jobs_for(1, Some(100_000), true).ok(), Some(100_000));
    }
}
