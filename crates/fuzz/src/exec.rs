//! Running one command under a wall-clock limit (the whole process group is killed at the
//! limit, so the commands' own probe processes go too) and an address-space limit (so a corrupt
//! header claiming gigabytes makes an allocation fail instead of exhausting the machine).

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Most bytes of a command's stdout and stderr kept each.
pub const KEEP_OUTPUT: usize = 64 * 1024;

/// How to run one command.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Wall-clock limit.
    pub time: Duration,
    /// Address-space limit in MiB (`ulimit -v`), none if `None`.
    pub memory_mb: Option<u64>,
}

/// A command line: the binary, its arguments and its working directory.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Working directory.
    pub dir: PathBuf,
}

impl Invocation {
    /// The command line as a shell would take it (single-quoted words), with `RUST_BACKTRACE=0`.
    pub fn shell_line(&self) -> String {
        let words = std::iter::once(self.program.as_os_str()).chain(self.args.iter().map(OsString::as_os_str));
        let quoted: Vec<String> = words.map(|w| format!("'{}'", w.to_string_lossy().replace('\'', "'\\''"))).collect();
        format!("cd '{}' && RUST_BACKTRACE=0 {}", self.dir.display(), quoted.join(" "))
    }
}

/// What came of a run.
#[derive(Clone, Debug)]
pub struct Finished {
    /// The exit status; `None` when it was killed at the time limit.
    pub status: Option<ExitStatus>,
    /// Its stdout (the first [`KEEP_OUTPUT`] bytes).
    pub stdout: String,
    /// Its stderr (the first [`KEEP_OUTPUT`] bytes).
    pub stderr: String,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// Reads a pipe to its end on a thread, keeping the first [`KEEP_OUTPUT`] bytes.
fn drain(pipe: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        if let Some(mut p) = pipe {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = p.read(&mut buf) {
                let room = KEEP_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
        String::from_utf8_lossy(&kept).into_owned()
    })
}

/// The command, started through `sh -c 'ulimit -v ..; exec ..'` when there is a memory limit
/// (the shell replaces itself with the program, so the status is the program's), in a process
/// group of its own, with `RUST_BACKTRACE=0`.
fn command(inv: &Invocation, limits: &Limits) -> Command {
    let mut c = match limits.memory_mb {
        Some(mb) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(format!("ulimit -v {}; exec \"$0\" \"$@\"", mb * 1024)).arg(&inv.program);
            c
        }
        None => Command::new(&inv.program),
    };
    c.args(&inv.args)
        .current_dir(&inv.dir)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    c
}

/// Kills every process of group `pgid` (the command and its children).
fn kill_group(pgid: u32) {
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).stderr(Stdio::null()).status();
}

/// Runs `inv` to its end or to the time limit, whichever comes first.
pub fn run(inv: &Invocation, limits: &Limits) -> std::io::Result<Finished> {
    let start = Instant::now();
    let mut child = command(inv, limits).spawn()?;
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if start.elapsed() >= limits.time {
            // The command is not reaped yet, so its id still names its own group.
            kill_group(child.id());
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok(Finished { status, stdout, stderr, seconds: start.elapsed().as_secs_f64() })
}

/// XXH3-64 over the names (relative to `path`) and contents of every file at or under `path`,
/// in name order; `None` when `path` does not exist.
pub fn digest(path: &Path) -> Option<u64> {
    let mut files = Vec::new();
    collect(path, path, &mut files);
    if files.is_empty() && !path.exists() {
        return None;
    }
    files.sort();
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for (name, file) in files {
        h.update(name.as_bytes());
        h.update(&[0]);
        h.update(&std::fs::read(&file).unwrap_or_default());
        h.update(&[0xff]);
    }
    Some(h.digest())
}

fn collect(root: &Path, path: &Path, out: &mut Vec<(String, PathBuf)>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            collect(root, &entry.path(), out);
        }
    } else if path.exists() {
        let name = path.strip_prefix(root).unwrap_or(path).to_string_lossy().into_owned();
        out.push((name, path.to_path_buf()));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sh(script: &str, secs: u64) -> Finished {
        let inv = Invocation { program: "/bin/sh".into(), args: vec!["-c".into(), script.into()], dir: std::env::temp_dir() };
        run(&inv, &Limits { time: Duration::from_secs(secs), memory_mb: Some(1024) }).unwrap()
    }

    #[test]
    fn exit_codes_output_and_time_limits() {
        let f = sh("echo out; echo err >&2; exit 3", 10);
        assert_eq!((f.status.unwrap().code(), f.stdout.as_str(), f.stderr.as_str()), (Some(3), "out\n", "err\n"));
        let f = sh("kill -SEGV $$", 10);
        assert_eq!(f.status.unwrap().code(), None);
        // A hang with a child that keeps the pipes open: both are killed at the limit.
        let f = sh("sleep 30 & sleep 30", 1);
        assert!(f.status.is_none() && f.seconds < 10.0, "{f:?}");
    }

    #[test]
    fn digests_see_names_and_contents() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), b"1").unwrap();
        let one = digest(d.path()).unwrap();
        std::fs::write(d.path().join("a"), b"2").unwrap();
        let two = digest(d.path()).unwrap();
        assert_ne!(two, one, "a content changed");
        // A rename with the same content is seen: names enter the digest.
        std::fs::rename(d.path().join("a"), d.path().join("b")).unwrap();
        assert_ne!(digest(d.path()).unwrap(), two, "a file renamed");
        std::fs::rename(d.path().join("b"), d.path().join("a")).unwrap();
        assert_eq!(digest(d.path()).unwrap(), two, "renamed back: as before");
        // Content moved from one file's end to the next file's start is seen too.
        std::fs::write(d.path().join("a"), b"xy").unwrap();
        std::fs::write(d.path().join("c"), b"z").unwrap();
        let split = digest(d.path()).unwrap();
        std::fs::write(d.path().join("a"), b"x").unwrap();
        std::fs::write(d.path().join("c"), b"yz").unwrap();
        assert_ne!(digest(d.path()).unwrap(), split, "bytes moved across a file boundary");
        // A file on its own is its content under an empty name; a path that does not exist has none.
        assert_ne!(digest(&d.path().join("a")), digest(&d.path().join("c")));
        assert_eq!(digest(&d.path().join("none")), None);
        assert!(
            Invocation { program: "/x y".into(), args: vec!["it's".into()], dir: "/".into() }.shell_line().ends_with("'/x y' 'it'\\''s'")
        );
    }
}
