//! Reading a possibly corrupt HDF5 file in a child process first.
//!
//! The HDF5 C library can crash (SIGSEGV, SIGABRT) or hang on some corrupt headers (see
//! `docs/checkpoint-format.md`). Every command that opens a file a user gives it therefore has
//! the file read completely — every dataset listed, size-checked and read, every digest and
//! attribute seal recomputed — by a child process of the same binary first ([`ChildProbe`]); a
//! crash or hang there becomes an [`Error::Unsafe`] naming the file, and a file the child read
//! completely is then safe to read in this process. The child runs [`probe_file`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::store::require_regular_file;
use crate::{Error, Result};

/// The hidden subcommand the child runs: `<exe> __probe FILE`.
pub const PROBE_COMMAND: &str = "__probe";

/// How long the child may take before the file counts as one that hangs the library.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

fn unsafe_file(file: &Path, message: String) -> Error {
    Error::Unsafe { path: file.to_path_buf(), message }
}

/// What the child does: reads `file` completely, as [`crate::inspect`] does, and every group's
/// attributes as loading reads them (a dataset that cannot be read is reported by `inspect`, not
/// here: the probe is about crashes and hangs).
pub fn probe_file(file: &Path) -> Result<()> {
    require_regular_file(file)?;
    crate::inspect(file)?;
    resilab_h5::Reader::open(file)?.read_all_attrs()?;
    Ok(())
}

/// Runs [`probe_file`] in a child process of a given binary.
#[derive(Clone, Debug)]
pub struct ChildProbe {
    exe: PathBuf,
    timeout: Duration,
}

impl ChildProbe {
    /// A probe that runs `exe __probe FILE` (the binary must dispatch [`PROBE_COMMAND`] to
    /// [`probe_file`]) with the given time limit.
    pub fn new(exe: PathBuf, timeout: Duration) -> Self {
        Self { exe, timeout }
    }

    /// A probe through the running binary, with [`PROBE_TIMEOUT`].
    pub fn current() -> Result<Self> {
        let exe = std::env::current_exe()
            .map_err(|e| Error::Unsafe { path: PathBuf::new(), message: format!("cannot find the resilab binary to probe with: {e}") })?;
        Ok(Self::new(exe, PROBE_TIMEOUT))
    }

    /// Reads `file` in a child process: `Ok` when the child read it completely, an error naming
    /// the file when it reported an error, crashed or did not finish in time.
    pub fn check(&self, file: &Path) -> Result<()> {
        require_regular_file(file)?;
        let mut child = std::process::Command::new(&self.exe)
            .arg(PROBE_COMMAND)
            .arg(file)
            .env("RUST_BACKTRACE", "0")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| unsafe_file(file, format!("cannot start the probe process: {e}")))?;
        // Read stderr on its own thread, so a child that writes much cannot block on the pipe.
        let reader = child.stderr.take().map(|mut s| {
            std::thread::spawn(move || {
                use std::io::Read as _;
                let mut text = String::new();
                let _ = s.read_to_string(&mut text);
                text
            })
        });
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if start.elapsed() >= self.timeout => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(unsafe_file(
                        file,
                        format!("reading it did not finish within {} s (HDF5 hangs on some corrupt files)", self.timeout.as_secs()),
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(unsafe_file(file, format!("probe process: {e}"))),
            }
        };
        let stderr = reader.and_then(|r| r.join().ok()).unwrap_or_default();
        if status.success() {
            return Ok(());
        }
        match status.code() {
            // The probe reported an ordinary error: pass its first line on.
            Some(1) => {
                let line = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or("could not be read");
                let message = line.trim_start_matches("error: ");
                // The child's message names the file already; do not name it twice.
                let shown = file.display().to_string();
                let message = message.strip_prefix(&format!("{shown}: ")).unwrap_or(message);
                Err(unsafe_file(file, message.to_string()))
            }
            Some(code) => Err(unsafe_file(file, format!("the process reading it failed (exit {code}): the file is corrupt"))),
            None => {
                use std::os::unix::process::ExitStatusExt as _;
                Err(unsafe_file(
                    file,
                    format!("reading it crashed the HDF5 library (signal {}): the file is corrupt", status.signal().unwrap_or(0)),
                ))
            }
        }
    }
}

/// Set in the environment of a command re-run by [`rerun_guarded`].
pub const GUARD_ENV: &str = "RESILAB_GUARDED_CHILD";

/// Whether this process is a command re-run by [`rerun_guarded`].
pub fn is_guarded_child() -> bool {
    std::env::var_os(GUARD_ENV).is_some()
}

/// How a guarded command ended.
#[derive(Debug)]
pub enum Guarded {
    /// It exited with this code; its standard error has been relayed.
    Exited(i32),
    /// It was killed by this signal (a crash inside the HDF5 library on a corrupt file, or an
    /// allocation a corrupt header asked for); `pid` was its process id.
    Crashed {
        /// The signal.
        signal: i32,
        /// The child's process id (it names the files it staged).
        pid: u32,
        /// The last line it wrote to standard error, if any.
        last_line: String,
    },
}

/// Runs this binary again with the same arguments, with [`GUARD_ENV`] set, and waits for it.
///
/// A command that reads a user's HDF5 file runs this way: probing a file in a child first does
/// not make reading it in this process safe, since the HDF5 library's behaviour on a corrupt file
/// depends on what was read before (the fuzzer found files that pass a probe and then crash a
/// second reader). The child does the whole command; its standard output is inherited, its
/// standard error relayed once it ends, and a crash becomes [`Guarded::Crashed`], which the
/// caller reports as one error line.
pub fn rerun_guarded() -> Result<Guarded> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::Unsafe { path: PathBuf::new(), message: format!("cannot find the resilab binary: {e}") })?;
    let child = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env(GUARD_ENV, "1")
        .stdin(std::process::Stdio::inherit())
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::Unsafe { path: exe.clone(), message: format!("cannot start the command's process: {e}") })?;
    let pid = child.id();
    let out = child
        .wait_with_output()
        .map_err(|e| Error::Unsafe { path: exe.clone(), message: format!("waiting for the command's process: {e}") })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if let Some(code) = out.status.code() {
        use std::io::Write as _;
        let _ = std::io::stderr().write_all(stderr.as_bytes());
        return Ok(Guarded::Exited(code));
    }
    use std::os::unix::process::ExitStatusExt as _;
    let last_line = stderr.lines().rev().find(|l| !l.trim().is_empty() && !l.starts_with("note: ")).unwrap_or("").trim().to_string();
    Ok(Guarded::Crashed { signal: out.status.signal().unwrap_or(0), pid, last_line })
}
