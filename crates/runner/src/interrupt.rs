//! What a TERM or INT leaves behind: the temporary directories a command registered here are
//! removed on the way out, so an interrupted command leaves its outputs resumable or empty,
//! never a half-made directory that the next run would refuse or that nobody cleans up.
//!
//! [`install`] (called once, by the binary) starts a thread that waits for SIGTERM and SIGINT;
//! on one it removes every directory registered with [`Temporary::new`] (again, while the
//! training threads still write into it) and then ends the process as the signal's default
//! action would (same exit status). Writers never make such a directory again: a run's files
//! are opened once, and its later directories are made only inside ones that exist. A directory is registered
//! for as long as its [`Temporary`] lives. A process killed with SIGKILL cannot clean up:
//! whoever needs the name next removes what it left (see `golden::ensure`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

/// Starts the thread that cleans up on SIGTERM and SIGINT. Call once, early, from the binary.
/// A signal the process was started ignoring (SIGINT of a job a script put in the background)
/// stays ignored.
pub fn install() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let watched: Vec<i32> = [SIGTERM, SIGINT].into_iter().filter(|&s| !ignored(s)).collect();
    if watched.is_empty() {
        return Ok(());
    }
    let mut signals = signal_hook::iterator::Signals::new(&watched)?;
    std::thread::Builder::new().name("resilab-interrupt".into()).spawn(move || {
        if let Some(signal) = signals.forever().next() {
            let dirs = REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for dir in dirs {
                remove_while_written(&dir);
            }
            let _ = signal_hook::low_level::emulate_default_handler(signal);
            std::process::exit(128 + signal);
        }
    })?;
    Ok(())
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
