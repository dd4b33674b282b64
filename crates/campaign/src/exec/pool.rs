//! The campaign's worker processes: the pool starts them, hands them jobs, kills them, and turns
//! what they print and how they end into [`Event`]s for the scheduler ([`super::schedule`]).
//! The pool owns its processes: dropping it (at the end of a campaign, or on any error that
//! leaves it) kills every process it still has and reaps it, so that none outlives the campaign,
//! as a running orphan or as a zombie.

use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::schedule::{Event, Exit};
use crate::ending::{Verdict, verdict_of};
use crate::work::{Job, Reply};
use crate::{Error, READY_LINE, REPLY_PREFIX, Result};

/// A worker's process.
struct Slot {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Tells this process's messages from those of the one it replaced.
    generation: u64,
}

/// What a reader thread passes on from a worker's standard output.
enum Msg {
    Line(usize, u64, String),
    Exit(usize, u64),
}

/// A fixed number of workers, each with a process or none.
pub(crate) struct Pool {
    slots: Vec<Option<Slot>>,
    tx: mpsc::Sender<Msg>,
    rx: mpsc::Receiver<Msg>,
    worker: Vec<OsString>,
    out: PathBuf,
    next_generation: u64,
}

impl Pool {
    /// `n` workers started by `worker` with `--dir <out>` appended, none started yet.
    pub(crate) fn new(n: usize, worker: &[OsString], out: &Path) -> Self {
        let (tx, rx) = mpsc::channel();
        Self { slots: (0..n).map(|_| None).collect(), tx, rx, worker: worker.to_vec(), out: out.to_path_buf(), next_generation: 0 }
    }

    /// How many workers.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.out.join("logs").join(format!("worker-{i}.log"))
    }

    /// Starts worker `i`'s process, its standard error appended to its log.
    pub(crate) fn spawn(&mut self, i: usize) -> Result<()> {
        let (program, args) = self.worker.split_first().ok_or_else(|| Error::Worker("no worker command".into()))?;
        let log = resilab_runner::files::append_output(&self.log_path(i))?;
        let mut child = Command::new(program)
            .args(args)
            .arg("--dir")
            .arg(&self.out)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|source| Error::WorkerStart { program: PathBuf::from(program), source })?;
        let generation = self.next_generation;
        self.next_generation += 1;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        // Owned from here on, so that the error below leaves no process behind.
        self.slots[i] = Some(Slot { child, stdin, generation });
        let stdout = stdout.ok_or_else(|| Error::Worker("a worker process without its standard output".into()))?;
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(Msg::Line(i, generation, line)).is_err() {
                    return;
                }
            }
            let _ = tx.send(Msg::Exit(i, generation));
        });
        Ok(())
    }

    /// Hands `job` to worker `i`. A failed write means the process is gone; its end follows as
    /// an event.
    pub(crate) fn send(&mut self, i: usize, job: Job) {
        let Some(stdin) = self.slots[i].as_mut().and_then(|s| s.stdin.as_mut()) else { return };
        let line = serde_json::to_string(&job).unwrap_or_default();
        let _ = writeln!(stdin, "{line}").and_then(|()| stdin.flush());
    }

    /// Kills worker `i`'s process, if it has one, and reaps it.
    pub(crate) fn kill(&mut self, i: usize) {
        if let Some(mut slot) = self.slots[i].take() {
            slot.stdin = None;
            let _ = slot.child.kill();
            let _ = slot.child.wait();
        }
    }

    /// The process ids of the workers' processes (tests).
    #[cfg(test)]
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.slots.iter().flatten().map(|s| s.child.id()).collect()
    }

    /// The next event, waiting at most `wait` for one ([`Event::Tick`] when none came). A
    /// process whose standard output closed is reaped here, and its end is the event.
    pub(crate) fn next(&mut self, wait: Duration) -> Result<Event<Reply>> {
        let msg = match self.rx.recv_timeout(wait) {
            Ok(msg) => msg,
            Err(mpsc::RecvTimeoutError::Timeout) => return Ok(Event::Tick),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::Worker("the channel from the worker processes closed".into()));
            }
        };
        let current = |i: usize, g: u64| self.slots[i].as_ref().is_some_and(|s| s.generation == g);
        match msg {
            Msg::Line(i, g, line) if current(i, g) => event_of(i, &line),
            Msg::Exit(i, g) if current(i, g) => Ok(Event::Exited(i, self.reap(i))),
            // A message of a process that the pool killed already.
            Msg::Line(..) | Msg::Exit(..) => Ok(Event::Tick),
        }
    }

    /// Waits for worker `i`'s process, whose standard output closed, to end: how it ended.
    fn reap(&mut self, i: usize) -> Exit {
        let status = self.slots[i].as_mut().map(|s| s.child.wait());
        self.kill(i);
        let log = self.log_path(i);
        let last_line = last_log_line(&log);
        match status {
            Some(Ok(status)) => {
                let interrupted = match verdict_of(status) {
                    Verdict::Interrupted(signal) => Some(signal),
                    Verdict::Crashed => None,
                };
                Exit { interrupted, how: exit_description(status), log, last_line }
            }
            Some(Err(e)) => Exit { interrupted: None, how: e.to_string(), log, last_line },
            None => Exit { interrupted: None, how: "gone".into(), log, last_line },
        }
    }
}

impl Drop for Pool {
    /// Ends every process the pool still has: its standard input closes (a worker ends itself
    /// at once then, mid-run included), it is killed in case it has not, and reaped.
    fn drop(&mut self) {
        for s in self.slots.iter_mut().flatten() {
            s.stdin = None;
        }
        for i in 0..self.slots.len() {
            self.kill(i);
        }
    }
}

/// The event a worker's line of output is: its ready line, an answer, or nothing.
fn event_of(i: usize, line: &str) -> Result<Event<Reply>> {
    if line == READY_LINE {
        return Ok(Event::Ready(i));
    }
    let Some(json) = line.strip_prefix(REPLY_PREFIX) else { return Ok(Event::Tick) };
    let reply: Reply = serde_json::from_str(json).map_err(|e| Error::Worker(format!("worker {i} sent a bad reply ({e}): {json}")))?;
    Ok(Event::Replied(i, reply.job, reply))
}

fn exit_description(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "killed".into(),
    }
}

fn last_log_line(path: &Path) -> String {
    std::fs::read_to_string(path).ok().and_then(|t| t.lines().rev().find(|l| !l.trim().is_empty()).map(str::to_string)).unwrap_or_default()
}
