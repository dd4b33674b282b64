//! What one run of a command on a mutated input amounted to.

use std::process::ExitStatus;

/// The outcome classes of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Exit status 0.
    Ok,
    /// Exit status 1 with exactly one `error:` line on stderr and no panic: what a corrupt
    /// input should give.
    CleanError,
    /// Any other failure with an exit status: several error lines, a backtrace, another code.
    MessyError,
    /// A Rust panic: "panicked" on stderr, or exit status 101.
    Panic,
    /// Killed by a signal (SIGSEGV, SIGABRT, ...).
    Signal,
    /// Still running at the wall-clock limit (its process group was killed).
    Hang,
    /// The command changed one of its input files.
    InputModified,
}

impl Class {
    /// Every class, in table order.
    pub const ALL: [Class; 7] =
        [Class::Ok, Class::CleanError, Class::MessyError, Class::Panic, Class::Signal, Class::Hang, Class::InputModified];

    /// The class's name in tables and CSV headers.
    pub fn name(self) -> &'static str {
        match self {
            Class::Ok => "ok",
            Class::CleanError => "clean_error",
            Class::MessyError => "messy_error",
            Class::Panic => "panic",
            Class::Signal => "signal",
            Class::Hang => "hang",
            Class::InputModified => "input_modified",
        }
    }

    /// Whether this class is a bug in the command (everything but `ok` and `clean_error`).
    pub fn is_failure(self) -> bool {
        !matches!(self, Class::Ok | Class::CleanError)
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What was observed of one run.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The exit status; `None` when the run was killed at the time limit.
    pub status: Option<ExitStatus>,
    /// Everything it wrote to stderr.
    pub stderr: String,
    /// Whether a digest of its input files changed across the run.
    pub input_modified: bool,
}

/// Whether `stderr` is one clean error report: exactly one line starting with `error:`, no
/// panic message and no backtrace.
pub fn is_clean_report(stderr: &str) -> bool {
    let errors = stderr.lines().filter(|l| l.starts_with("error:")).count();
    errors == 1 && !stderr.contains("panicked") && !stderr.contains("stack backtrace")
}

/// The class of a run. When several apply, the first of hang, signal, panic, input_modified,
/// then the exit status decides (0: ok; 1 with a clean report: clean_error; else messy_error).
pub fn classify(o: &Observed) -> Class {
    let Some(status) = o.status else { return Class::Hang };
    if status.code().is_none() {
        return Class::Signal;
    }
    if o.stderr.contains("panicked") || status.code() == Some(101) {
        return Class::Panic;
    }
    if o.input_modified {
        return Class::InputModified;
    }
    match status.code() {
        Some(0) => Class::Ok,
        Some(1) if is_clean_report(&o.stderr) => Class::CleanError,
        _ => Class::MessyError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt as _;

    fn exited(code: i32) -> Option<ExitStatus> {
        Some(ExitStatus::from_raw(code << 8))
    }

    fn class(status: Option<ExitStatus>, stderr: &str, input_modified: bool) -> Class {
        classify(&Observed { status, stderr: stderr.into(), input_modified })
    }

    #[test]
    fn synthetic_outputs_are_classified() {
        assert_eq!(class(exited(0), "", false), Class::Ok);
        assert_eq!(class(exited(0), "note: something\n", false), Class::Ok);
        assert_eq!(class(exited(1), "error: f.h5: /model: bad header\n", false), Class::CleanError);
        assert_eq!(class(exited(1), "note: x\nerror: f.h5: bad\n", false), Class::CleanError);
        let panic = "thread 'main' panicked at crates/h5/src/lib.rs:10:5:\ncapacity overflow\n";
        assert_eq!(class(exited(101), panic, false), Class::Panic);
        assert_eq!(class(exited(1), panic, false), Class::Panic);
        assert_eq!(class(exited(101), "", false), Class::Panic);
        assert_eq!(class(Some(ExitStatus::from_raw(11)), "", false), Class::Signal); // SIGSEGV
        assert_eq!(class(Some(ExitStatus::from_raw(6)), "memory allocation of 1 bytes failed\n", false), Class::Signal);
        assert_eq!(class(None, "", false), Class::Hang);
        assert_eq!(class(exited(0), "", true), Class::InputModified);
        assert_eq!(class(exited(1), "error: x\n", true), Class::InputModified);
        assert_eq!(class(exited(1), "error: a\nerror: b\n", false), Class::MessyError);
        assert_eq!(class(exited(1), "something went wrong\n", false), Class::MessyError);
        assert_eq!(class(exited(2), "error: unexpected argument\n", false), Class::MessyError);
        assert_eq!(class(exited(1), "error: x\nstack backtrace:\n  0: main\n", false), Class::MessyError);
    }

    #[test]
    fn only_ok_and_clean_errors_pass() {
        let failing: Vec<Class> = Class::ALL.into_iter().filter(|c| c.is_failure()).collect();
        assert_eq!(failing, [Class::MessyError, Class::Panic, Class::Signal, Class::Hang, Class::InputModified]);
    }
}
