//! What a TERM, INT or HUP leaves behind: the temporary directories a command registered here
//! are removed on the way out, so an interrupted command leaves its outputs resumable or empty,
//! never a half-made directory that the next run would refuse or that nobody cleans up.
//!
//! [`install`] (called once, by the binary) starts a thread that waits for the [`SIGNALS`]; on
//! one it notes the signal ([`received`]: a campaign worker then replies nothing more), removes
//! every directory registered with [`Temporary::new`] (again, while the training threads still
//! write into it) and then ends the process as the signal's default action would (same exit
//! status). [`end_as`] ends the process the same way from any thread. Writers never make such a directory again: a run's files
//! are opened once, and its later directories are made only inside ones that exist. A directory is registered
//! for as long as its [`Temporary`] lives. A process killed with SIGKILL cannot clean up:
//! whoever needs the name next removes what it left (see `golden::ensure`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

/// The signals that interrupt a command: how people and batch systems stop a job (`kill`,
/// `timeout`, `scancel`, Ctrl-C, a closed terminal). A campaign worker ended by one has been
/// interrupted, not crashed.
pub const SIGNALS: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// The last of the [`SIGNALS`] this process received (0: none yet), set by the signal handler
/// itself as the signal arrives, before any thread of the process runs on.
static RECEIVED: LazyLock<Arc<AtomicUsize>> = LazyLock::new(|| Arc::new(AtomicUsize::new(0)));

/// The registered directories.
static REGISTERED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A temporary directory removed if a TERM or INT ends the process while this value lives.
/// Dropping it only unregisters the directory (its owner decides what becomes of it).
#[derive(Debug)]
pub struct Temporary {
    dir: PathBuf,
}

impl Temporary {
    /// Registers `dir`.
    pub fn new(dir: &Path) -> Self {
        REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).push(dir.to_path_buf());
        Self { dir: dir.to_path_buf() }
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        let mut dirs = REGISTERED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = dirs.iter().rposition(|d| *d == self.dir) {
            dirs.swap_remove(i);
        }
    }
}

/// Starts the thread that cleans up on the [`SIGNALS`]. Call once, early, from the binary. A
/// signal the process was started ignoring (SIGINT of a job a script put in the background,
/// SIGHUP under `nohup`) stays ignored.
pub fn install() -> std::io::Result<()> {
    let watched: Vec<i32> = SIGNALS.into_iter().filter(|&s| !ignored(s)).collect();
    if watched.is_empty() {
        return Ok(());
    }
    for &s in &watched {
        signal_hook::flag::register_usize(s, Arc::clone(&RECEIVED), s as usize)?;
    }
    let mut signals = signal_hook::iterator::Signals::new(&watched)?;
    std::thread::Builder::new().name("resilab-interrupt".into()).spawn(move || {
        if let Some(signal) = signals.forever().next() {
            end_as(signal);
        }
    })?;
    Ok(())
}

/// The one of the [`SIGNALS`] this process received, from the moment it arrived (or [`end_as`]
/// was called): from then on the process is ending, and what it computes is no result (its
/// temporary directories are being removed under it).
pub fn received() -> Option<i32> {
    i32::try_from(RECEIVED.load(Ordering::SeqCst)).ok().filter(|&s| s != 0)
}

/// Ends the process as `signal` would: notes it ([`received`]), removes the registered
/// temporary directories, then ends by the signal's default action (exit status 128 + the
/// signal where that fails).
pub fn end_as(signal: i32) -> ! {
    let _ = RECEIVED.compare_exchange(0, usize::try_from(signal).unwrap_or(0), Ordering::SeqCst, Ordering::SeqCst);
    let dirs = REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for dir in dirs {
        remove_while_written(&dir);
    }
    let _ = signal_hook::low_level::emulate_default_handler(signal);
    std::process::exit(128 + signal);
}

/// A signal's name (`SIGTERM`), or its number where it has none.
pub fn signal_name(signal: i32) -> String {
    signal_hook::low_level::signal_name(signal).map_or_else(|| format!("signal {signal}"), str::to_string)
}

/// Whether `signal`'s disposition is "ignore" (as inherited from the parent).
#[allow(unsafe_code)]
fn ignored(signal: i32) -> bool {
    // SAFETY: a query only (no new action is given); `old` is a zeroed sigaction that the call
    // fills in, alive for the call.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Removes `dir`, again while the other threads, still running, add to it (a removal that
/// meets a file made meanwhile fails with "directory not empty"): at most a second.
fn remove_while_written(dir: &Path) {
    for _ in 0..100 {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ignored_signal_is_told_from_a_default_one() {
        // The test harness leaves SIGTERM at its default; SIGPIPE is ignored by Rust programs.
        assert!(!ignored(libc::SIGTERM));
        assert!(ignored(libc::SIGPIPE));
    }

    #[test]
    fn the_interrupting_signals_are_named_and_none_is_received_yet() {
        let names: Vec<String> = SIGNALS.into_iter().map(signal_name).collect();
        assert_eq!(names, ["SIGTERM", "SIGINT", "SIGHUP"]);
        assert_eq!(signal_name(libc::SIGSEGV), "SIGSEGV");
        assert_eq!(signal_name(1000), "signal 1000");
        assert_eq!(received(), None);
    }

    #[test]
    fn a_temporary_is_registered_while_it_lives() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("x.tmp");
        let registered = || REGISTERED.lock().unwrap().contains(&dir);
        let t = Temporary::new(&dir);
        assert!(registered());
        drop(t);
        assert!(!registered());
    }
}
