//! How a worker process ended, and what the campaign makes of it: a result of the run it held,
//! recorded, or an interruption of the campaign, which records nothing.
//!
//! | the worker process | verdict |
//! |---|---|
//! | was ended by SIGTERM, SIGINT or SIGHUP | interruption: nothing recorded, the campaign stops, `--resume` runs the run again |
//! | exited with 128 + SIGTERM, SIGINT or SIGHUP (143, 130, 129) | interruption (how resilab's own handler ends a process where it cannot end it by the signal) |
//! | was ended by any other signal: SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGKILL, ... | crashed, recorded |
//! | exited with any other status | crashed, recorded |
//!
//! TERM, INT and HUP are how people and batch systems stop a job (`scancel`, `timeout`, `kill`,
//! Ctrl-C, a closed terminal), and they reach every process of the campaign's process group,
//! the workers as often as not before the campaign process itself. SIGKILL is a crash of the run:
//! it is what the kernel's out-of-memory killer sends to the process that grew, and a campaign
//! must be able to finish over a run that always does. A `kill -9` of the whole group ends the
//! campaign process with its workers, before it can record anything; a `kill -9` of one worker
//! alone is recorded as that run's crash.

use resilab_runner::interrupt::SIGNALS;

/// What a campaign makes of a worker process's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The run it held crashed: recorded as `crashed`.
    Crashed,
    /// Someone stopped the campaign with this signal: nothing is recorded.
    Interrupted(i32),
}

/// The verdict on a worker process that exited with `code`, or was ended by `signal`.
pub(crate) fn verdict(code: Option<i32>, signal: Option<i32>) -> Verdict {
    let by_signal = signal.filter(|s| SIGNALS.contains(s));
    let by_handler = code.and_then(|c| c.checked_sub(128)).filter(|s| SIGNALS.contains(s));
    match by_signal.or(by_handler) {
        Some(s) => Verdict::Interrupted(s),
        None => Verdict::Crashed,
    }
}

/// The verdict on a worker process that ended with `status`.
pub(crate) fn verdict_of(status: std::process::ExitStatus) -> Verdict {
    use std::os::unix::process::ExitStatusExt as _;
    verdict(status.code(), status.signal())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Linux's numbers (signal(7)), which every architecture resilab builds for shares.
    const SIGHUP: i32 = 1;
    const SIGINT: i32 = 2;
    const SIGILL: i32 = 4;
    const SIGABRT: i32 = 6;
    const SIGBUS: i32 = 7;
    const SIGFPE: i32 = 8;
    const SIGKILL: i32 = 9;
    const SIGSEGV: i32 = 11;
    const SIGPIPE: i32 = 13;
    const SIGTERM: i32 = 15;

    #[test]
    fn term_int_and_hup_interrupt_and_every_other_end_is_a_crash() {
        assert_eq!(SIGNALS, [SIGTERM, SIGINT, SIGHUP]);
        let table = [
            // (exit code, signal) -> verdict
            ((None, Some(SIGTERM)), Verdict::Interrupted(SIGTERM)),
            ((None, Some(SIGINT)), Verdict::Interrupted(SIGINT)),
            ((None, Some(SIGHUP)), Verdict::Interrupted(SIGHUP)),
            ((Some(143), None), Verdict::Interrupted(SIGTERM)),
            ((Some(130), None), Verdict::Interrupted(SIGINT)),
            ((Some(129), None), Verdict::Interrupted(SIGHUP)),
            ((None, Some(SIGSEGV)), Verdict::Crashed),
            ((None, Some(SIGBUS)), Verdict::Crashed),
            ((None, Some(SIGFPE)), Verdict::Crashed),
            ((None, Some(SIGILL)), Verdict::Crashed),
            ((None, Some(SIGABRT)), Verdict::Crashed),
            ((None, Some(SIGKILL)), Verdict::Crashed),
            ((None, Some(SIGPIPE)), Verdict::Crashed),
            ((Some(0), None), Verdict::Crashed),
            ((Some(1), None), Verdict::Crashed),
            ((Some(101), None), Verdict::Crashed),
            ((Some(134), None), Verdict::Crashed),
            ((Some(137), None), Verdict::Crashed),
            ((Some(-1), None), Verdict::Crashed),
            ((None, None), Verdict::Crashed),
        ];
        for ((code, signal), want) in table {
            assert_eq!(verdict(code, signal), want, "exit code {code:?}, signal {signal:?}");
        }
    }

    #[test]
    fn a_real_process_ended_by_term_is_an_interruption_and_one_that_aborts_a_crash() {
        let end = |script: &str| {
            let status = std::process::Command::new("/bin/sh").args(["-c", script]).status().unwrap();
            verdict_of(status)
        };
        assert_eq!(end("kill -TERM $$"), Verdict::Interrupted(SIGTERM));
        assert_eq!(end("kill -HUP $$"), Verdict::Interrupted(SIGHUP));
        assert_eq!(end("kill -ABRT $$"), Verdict::Crashed);
        assert_eq!(end("kill -KILL $$"), Verdict::Crashed);
        assert_eq!(end("exit 3"), Verdict::Crashed);
    }
}
