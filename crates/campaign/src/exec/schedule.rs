//! The campaign's scheduling decisions, apart from the processes they concern: events in (a
//! worker process said it is ready, answered, ended; time passed), actions out (start a worker
//! process, hand it a job, kill it, record an answer, stop, finish). [`super::pool`] carries
//! the actions out and turns what its processes do into events; nothing here touches a process,
//! a file or the clock, so every decision is tested on its own.
//!
//! | event (at time `now`) | decision |
//! |---|---|
//! | a worker answers the job it holds | record the answer; the worker is free |
//! | a worker answers a job it no longer holds (its time ran out meanwhile) | nothing |
//! | a worker's process ended by TERM, INT or HUP ([`crate::ending`]) | stop: interrupted; the job it held is not recorded |
//! | a worker's process ends before it said it was ready | stop: the worker failed to start (its log says why) |
//! | a worker's process ends while it holds a job | record the job as crashed; a new process takes the next job |
//! | a worker's process ends while it is free | nothing; a new process is started when a job waits |
//! | a job held longer than its time limit | kill the worker; record the job as timed out |
//! | every job has its answer | finish |
//! | a job waits and a worker is free, or has no process | start its process if it has none; hand it the job |
//!
//! The answers are of any type `R` (the pool's are [`crate::Reply`]): the scheduler only
//! passes them on.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::Error;
use crate::work::Job;

/// The longest wait for an event before the time limits are looked at again.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// How a worker's process ended, as the pool saw it (the process has been reaped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Exit {
    /// The interrupting signal (TERM, INT or HUP) that ended it, if one did.
    pub(crate) interrupted: Option<i32>,
    /// How it ended, in words: `exit status 3`, `signal 11`.
    pub(crate) how: String,
    /// Its log file (its standard error).
    pub(crate) log: PathBuf,
    /// The last line of its log that is not blank.
    pub(crate) last_line: String,
}

/// What happened in the pool.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Event<R> {
    /// Time passed (no message came, or one of no consequence).
    Tick,
    /// Worker `0` said it is ready for jobs.
    Ready(usize),
    /// Worker `0` answered job `1` with `2`.
    Replied(usize, Job, R),
    /// Worker `0`'s process ended.
    Exited(usize, Exit),
}

/// A job's answer, to record.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Answer<R> {
    /// The worker's own answer.
    Replied(R),
    /// The worker's process died during the job.
    Crashed {
        /// The job.
        job: Job,
        /// How it died, with its log's last line.
        message: String,
    },
    /// The job passed its time limit and its worker was killed.
    TimedOut {
        /// The job.
        job: Job,
        /// The time limit.
        message: String,
    },
}

/// Why the campaign stops before every job has its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// A worker's process was ended by `signal` while it held `job`: someone stopped the campaign.
    Interrupted {
        /// The signal.
        signal: i32,
        /// The worker.
        worker: usize,
        /// The job it held.
        job: Option<Job>,
    },
    /// A worker's process ended before it was ready.
    NotStarted(Exit),
}

/// What the pool is to do.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Action<R> {
    /// Start a process for worker `0` (it has none).
    Start(usize),
    /// Hand worker `0` job `1`.
    Send(usize, Job),
    /// Kill worker `0`'s process and reap it.
    Kill(usize),
    /// Record a job's answer.
    Record(Answer<R>),
    /// Stop: no further action follows.
    Stop(Stop),
    /// Every job has its answer: no further action follows.
    Finish,
}

/// One worker, as the scheduler sees it.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// It has a process.
    live: bool,
    /// Its process said it is ready.
    ready: bool,
    /// The job it holds, and since when.
    busy: Option<(Job, Instant)>,
}

/// The scheduling state of one set of jobs on a pool of workers, each job under its time
/// limit `timeout(job)`.
pub(crate) struct Scheduler<F> {
    queue: VecDeque<Job>,
    slots: Vec<Slot>,
    outstanding: usize,
    timeout: F,
}

impl<F: Fn(&Job) -> Duration> Scheduler<F> {
    /// `jobs` for `workers` workers, none of which has a process yet.
    pub(crate) fn new(workers: usize, jobs: Vec<Job>, timeout: F) -> Self {
        Self { outstanding: jobs.len(), queue: jobs.into(), slots: vec![Slot::default(); workers], timeout }
    }

    /// The decisions on `event`, which happened at `now`; the first call takes [`Event::Tick`].
    /// The list ends with [`Action::Stop`] or [`Action::Finish`] when the jobs are over.
    pub(crate) fn on<R>(&mut self, event: Event<R>, now: Instant) -> Vec<Action<R>> {
        let mut actions = Vec::new();
        match event {
            Event::Tick => {}
            Event::Ready(i) => {
                if let Some(s) = self.slots.get_mut(i).filter(|s| s.live) {
                    s.ready = true;
                }
            }
            Event::Replied(i, job, reply) => {
                if let Some(s) = self.slots.get_mut(i).filter(|s| s.busy.is_some_and(|(j, _)| j == job)) {
                    s.busy = None;
                    self.outstanding -= 1;
                    actions.push(Action::Record(Answer::Replied(reply)));
                }
            }
            Event::Exited(i, exit) => {
                if let Err(stop) = self.exited(i, exit, &mut actions) {
                    actions.push(Action::Stop(stop));
                    return actions;
                }
            }
        }
        self.expire(now, &mut actions);
        if self.outstanding == 0 {
            actions.push(Action::Finish);
        } else {
            self.hand_out(now, &mut actions);
        }
        actions
    }

    /// How long to wait for the next event at `now`: until the first time limit runs out, at
    /// most [`POLL`].
    pub(crate) fn wait(&self, now: Instant) -> Duration {
        self.slots
            .iter()
            .filter_map(|s| s.busy.map(|(j, t)| (t + (self.timeout)(&j)).saturating_duration_since(now)))
            .fold(POLL, Duration::min)
    }

    /// Worker `i`'s process ended: the crash of the job it held, if any, or why the campaign stops.
    fn exited<R>(&mut self, i: usize, exit: Exit, actions: &mut Vec<Action<R>>) -> Result<(), Stop> {
        let Some(slot) = self.slots.get_mut(i) else { return Ok(()) };
        let ended = std::mem::take(slot);
        let job = ended.busy.map(|(j, _)| j);
        if let Some(signal) = exit.interrupted {
            return Err(Stop::Interrupted { signal, worker: i, job });
        }
        if !ended.ready {
            return Err(Stop::NotStarted(exit));
        }
        if let Some(job) = job {
            self.outstanding -= 1;
            let message = format!("worker process died ({}) during the run; see {}: {}", exit.how, exit.log.display(), exit.last_line);
            actions.push(Action::Record(Answer::Crashed { job, message }));
        }
        Ok(())
    }

    /// Kills the workers whose job has been held longer than its time limit at `now`.
    fn expire<R>(&mut self, now: Instant, actions: &mut Vec<Action<R>>) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some((job, since)) = slot.busy else { continue };
            let limit = (self.timeout)(&job);
            if now.duration_since(since) > limit {
                *slot = Slot::default();
                self.outstanding -= 1;
                actions.push(Action::Kill(i));
                let message = format!("killed after {:.0} s (timeout)", limit.as_secs_f64());
                actions.push(Action::Record(Answer::TimedOut { job, message }));
            }
        }
    }

    /// Hands the waiting jobs to the free workers, in order, starting the processes they need.
    fn hand_out<R>(&mut self, now: Instant, actions: &mut Vec<Action<R>>) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if self.queue.is_empty() {
                break;
            }
            if !slot.live {
                *slot = Slot { live: true, ready: false, busy: None };
                actions.push(Action::Start(i));
            }
            if slot.busy.is_none()
                && let Some(job) = self.queue.pop_front()
            {
                slot.busy = Some((job, now));
                actions.push(Action::Send(i, job));
            }
        }
    }
}

/// What a job is, in an interruption's message.
fn job_text(job: Option<Job>) -> String {
    match job {
        Some(Job::Run { index }) => format!("the run of grid index {index}"),
        Some(Job::Prep { index }) => format!("the base run of grid index {index}"),
        None => "no run".into(),
    }
}

impl From<Stop> for Error {
    fn from(stop: Stop) -> Self {
        match stop {
            Stop::Interrupted { signal, worker, job } => Error::Interrupted { signal, worker, during: job_text(job) },
            Stop::NotStarted(exit) => {
                Error::Worker(format!("a worker process failed to start ({}): {} (see {})", exit.how, exit.last_line, exit.log.display()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Actions = Vec<Action<&'static str>>;

    fn none() -> Actions {
        Vec::new()
    }

    const fn run(index: u64) -> Job {
        Job::Run { index }
    }

    /// Runs 0 and 1 have 10 s each, run 7 one second, a base run 100 s.
    fn limit(job: &Job) -> Duration {
        match job {
            Job::Prep { .. } => Duration::from_secs(100),
            Job::Run { index: 7 } => Duration::from_secs(1),
            Job::Run { .. } => Duration::from_secs(10),
        }
    }

    fn scheduler(workers: usize, jobs: &[Job]) -> Scheduler<fn(&Job) -> Duration> {
        Scheduler::new(workers, jobs.to_vec(), limit)
    }

    fn exit(interrupted: Option<i32>) -> Exit {
        Exit { interrupted, how: "exit status 3".into(), log: "logs/worker-0.log".into(), last_line: "about to die".into() }
    }

    /// Starts `s` at `t0` and says every worker it started is ready.
    fn started(s: &mut Scheduler<fn(&Job) -> Duration>, t0: Instant) -> Actions {
        let actions = s.on(Event::Tick, t0);
        for a in &actions {
            if let Action::Start(i) = a {
                assert_eq!(s.on::<&str>(Event::Ready(*i), t0), none());
            }
        }
        actions
    }

    #[test]
    fn the_first_jobs_start_one_process_per_worker_and_no_job_starts_none() {
        let t0 = Instant::now();
        let mut s = scheduler(2, &[run(0), run(1), run(2)]);
        let want: Actions = vec![Action::Start(0), Action::Send(0, run(0)), Action::Start(1), Action::Send(1, run(1))];
        assert_eq!(s.on(Event::Tick, t0), want);
        // Nothing changes until an event: no second process, no job handed out twice.
        assert_eq!(s.on::<&str>(Event::Tick, t0 + Duration::from_secs(1)), none());
        // More workers than jobs: only the processes that get a job are started.
        assert_eq!(scheduler(4, &[run(0)]).on::<&str>(Event::Tick, t0), [Action::Start(0), Action::Send(0, run(0))]);
        assert_eq!(scheduler(2, &[]).on::<&str>(Event::Tick, t0), [Action::Finish]);
    }

    #[test]
    fn an_answer_is_recorded_and_its_worker_takes_the_next_job_until_every_job_is_answered() {
        let t0 = Instant::now();
        let mut s = scheduler(2, &[run(0), run(1), run(2)]);
        started(&mut s, t0);
        let t = t0 + Duration::from_secs(2);
        assert_eq!(s.on(Event::Replied(1, run(1), "one"), t), [Action::Record(Answer::Replied("one")), Action::Send(1, run(2))]);
        assert_eq!(s.on(Event::Replied(0, run(0), "zero"), t), [Action::Record(Answer::Replied("zero"))]);
        assert_eq!(s.on(Event::Replied(1, run(2), "two"), t), [Action::Record(Answer::Replied("two")), Action::Finish]);
    }

    #[test]
    fn an_answer_to_a_job_the_worker_does_not_hold_is_ignored() {
        let t0 = Instant::now();
        let mut s = scheduler(2, &[run(0), run(1)]);
        started(&mut s, t0);
        // Worker 0 holds run 0: an answer to run 1 from it (or from a worker that does not
        // exist) records nothing and frees nothing.
        assert_eq!(s.on(Event::Replied(0, run(1), "stray"), t0), none());
        assert_eq!(s.on(Event::Replied(5, run(1), "stray"), t0), none());
        assert_eq!(s.on(Event::Replied(0, run(0), "zero"), t0), [Action::Record(Answer::Replied("zero"))]);
    }

    #[test]
    fn a_job_past_its_limit_kills_its_worker_is_recorded_as_timed_out_and_a_new_process_takes_the_next() {
        let t0 = Instant::now();
        let mut s = scheduler(1, &[run(7), run(0)]);
        started(&mut s, t0);
        // Exactly at its limit a job is not yet over it.
        assert_eq!(s.on::<&str>(Event::Tick, t0 + Duration::from_secs(1)), none());
        let t = t0 + Duration::from_millis(1001);
        let message = "killed after 1 s (timeout)".to_string();
        let want: Actions =
            vec![Action::Kill(0), Action::Record(Answer::TimedOut { job: run(7), message }), Action::Start(0), Action::Send(0, run(0))];
        assert_eq!(s.on(Event::Tick, t), want);
        // The killed process's late answer is no answer; the new one's is, and it is the last.
        assert_eq!(s.on(Event::Replied(0, run(7), "late"), t), none());
        assert_eq!(s.on::<&str>(Event::Ready(0), t), none());
        assert_eq!(s.on(Event::Replied(0, run(0), "zero"), t), [Action::Record(Answer::Replied("zero")), Action::Finish]);
    }

    #[test]
    fn each_job_has_its_own_limit_and_the_wait_ends_at_the_first_to_run_out() {
        let t0 = Instant::now();
        let mut s = scheduler(2, &[Job::Prep { index: 0 }, run(7)]);
        assert_eq!(s.wait(t0), POLL, "no job held: the poll interval");
        started(&mut s, t0);
        assert_eq!(s.wait(t0 + Duration::from_millis(800)), Duration::from_millis(200));
        assert_eq!(s.wait(t0 + Duration::from_secs(5)), Duration::ZERO);
        assert_eq!(s.wait(t0), POLL, "never longer than the poll interval");
        // At 50 s the run is over its limit, the base run (100 s) is not.
        let actions = s.on::<&str>(Event::Tick, t0 + Duration::from_secs(50));
        assert!(
            matches!(actions.as_slice(), [Action::Kill(1), Action::Record(Answer::TimedOut { job, .. })] if *job == run(7)),
            "{actions:?}"
        );
    }

    #[test]
    fn a_process_that_dies_during_a_job_is_its_crash_with_the_log_line_and_one_dying_free_is_replaced_when_needed() {
        let t0 = Instant::now();
        let mut s = scheduler(2, &[run(0), run(1), run(2)]);
        started(&mut s, t0);
        let message = "worker process died (exit status 3) during the run; see logs/worker-0.log: about to die".to_string();
        let want: Actions = vec![Action::Record(Answer::Crashed { job: run(0), message }), Action::Start(0), Action::Send(0, run(2))];
        assert_eq!(s.on(Event::Exited(0, exit(None)), t0), want);
        assert_eq!(s.on::<&str>(Event::Ready(0), t0), none());
        assert_eq!(s.on(Event::Replied(0, run(2), "two"), t0), [Action::Record(Answer::Replied("two"))]);
        // Worker 0 is free and no job waits: its end records nothing, and starts nothing.
        assert_eq!(s.on::<&str>(Event::Exited(0, exit(None)), t0), none());
        assert_eq!(s.on(Event::Replied(1, run(1), "one"), t0), [Action::Record(Answer::Replied("one")), Action::Finish]);
    }

    #[test]
    fn a_process_ended_by_an_interrupting_signal_stops_the_campaign_without_recording_its_job() {
        let t0 = Instant::now();
        let mut s = scheduler(2, &[run(0), run(1), run(2)]);
        started(&mut s, t0);
        let stop = Stop::Interrupted { signal: 15, worker: 1, job: Some(run(1)) };
        assert_eq!(s.on::<&str>(Event::Exited(1, exit(Some(15))), t0), [Action::Stop(stop.clone())]);
        let text = Error::from(stop).to_string();
        assert!(text.contains("worker process 1 was ended by SIGTERM during the run of grid index 1"), "{text}");
        // An interruption of a free worker names no run; a ready one is no exception.
        let mut free = scheduler(1, &[]);
        let stop = Stop::Interrupted { signal: 1, worker: 0, job: None };
        assert_eq!(free.on::<&str>(Event::Exited(0, exit(Some(1))), t0), [Action::Stop(stop.clone())]);
        assert!(Error::from(stop).to_string().contains("ended by SIGHUP during no run"));
    }

    #[test]
    fn a_process_that_ends_before_it_is_ready_stops_the_campaign_naming_its_log() {
        let t0 = Instant::now();
        let mut s = scheduler(1, &[Job::Prep { index: 3 }]);
        assert_eq!(s.on::<&str>(Event::Tick, t0), [Action::Start(0), Action::Send(0, Job::Prep { index: 3 })]);
        assert_eq!(s.on::<&str>(Event::Exited(0, exit(None)), t0), [Action::Stop(Stop::NotStarted(exit(None)))]);
        let text = Error::from(Stop::NotStarted(exit(None))).to_string();
        assert_eq!(text, "campaign worker: a worker process failed to start (exit status 3): about to die (see logs/worker-0.log)");
    }
}
