//! How resilab opens what it writes: an exclusive lock on every directory a command writes,
//! and output files that are never written through a symbolic link.
//!
//! The lock is an advisory lock (`flock`) on `<dir>/.resilab.lock`, held for the command's
//! life: a second writer fails at once, naming the process that holds the directory, and the
//! operating system releases it when that process ends, however it ends, so a lock left by a
//! killed run never blocks. The file keeps the holder's process id and start time for that
//! message; its presence alone means nothing.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The lock file in a directory a command writes.
pub const LOCK_FILE: &str = ".resilab.lock";

/// A directory held for writing; released when dropped or when the process ends.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    /// The directory.
    pub dir: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// Locks `dir` (created if missing) for this process's writes; `what` names it in errors
/// (`--out`, `checkpoint.dir`). Fails at once, naming the holder, when another process holds it.
pub fn lock_dir(dir: &Path, what: &str) -> Result<DirLock> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(LOCK_FILE);
    let mut file = open_no_follow(&path, OpenOptions::new().read(true).write(true).create(true).truncate(false))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            let holder = if holder.trim().is_empty() { "another process".to_string() } else { holder.trim().to_string() };
            return Err(Error::Config(format!(
                "{what} {} is in use by {holder}: wait for it to end, or give another directory",
                dir.display()
            )));
        }
        Err(TryLockError::Error(source)) => return Err(Error::Io { path, source }),
    }
    let note = format!("process {} (started {} UTC)\n", std::process::id(), crate::utc_stamp());
    file.set_len(0).and_then(|()| file.write_all(note.as_bytes())).and_then(|()| file.flush()).map_err(io(&path))?;
    Ok(DirLock { _file: file, dir: dir.to_path_buf() })
}

/// Opens `path` with `options`, refusing to follow a symbolic link at its last component: an
/// output named by a link is an error naming it, never a write into the file it points to.
pub fn open_no_follow(path: &Path, options: &mut OpenOptions) -> Result<File> {
    match options.custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(f) => Ok(f),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(Error::Config(format!(
            "{} is a symbolic link: resilab writes its outputs only into files of their own, never through a link (remove it, or give another directory)",
            path.display()
        ))),
        Err(source) => Err(Error::Io { path: path.to_path_buf(), source }),
    }
}

/// Creates (or truncates) the output file `path`, never through a link.
pub fn create_output(path: &Path) -> Result<File> {
    open_no_follow(path, OpenOptions::new().write(true).create(true).truncate(true))
}

/// Opens the output file `path` for appending (created if missing), never through a link.
pub fn append_output(path: &Path) -> Result<File> {
    open_no_follow(path, OpenOptions::new().append(true).create(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_fails_at_once_naming_the_holder_and_a_dropped_one_frees_the_directory() {
        let d = tempfile::tempdir().unwrap();
        let held = lock_dir(d.path(), "--out").unwrap();
        let e = lock_dir(d.path(), "--out").unwrap_err().to_string();
        assert!(e.contains("is in use by process") && e.contains(&std::process::id().to_string()), "{e}");
        drop(held);
        lock_dir(d.path(), "--out").unwrap();
    }

    #[test]
    fn outputs_are_never_written_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim.txt");
        std::fs::write(&victim, "keep me").unwrap();
        let link = d.path().join("metrics.csv");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for e in [create_output(&link).unwrap_err(), append_output(&link).unwrap_err()] {
            assert!(e.to_string().contains("metrics.csv is a symbolic link"), "{e}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        let mut f = create_output(&d.path().join("plain.csv")).unwrap();
        f.write_all(b"x").unwrap();
    }
}
