//! Files that a configuration or another file names, opened as regular files and read with a
//! bound.
//!
//! A path a user writes into a configuration (`injection_sequence_path`, a dataset's batch
//! files, a probe, the configuration itself) may name anything: `/dev/zero` (read until the
//! allocator gives up), a FIFO (a read that never returns), a file far larger than its format
//! allows. [`RegularFile::open`] opens it without blocking (`O_NONBLOCK`, so opening a FIFO
//! returns at once), asks the open handle what it is (`fstat`, which follows symlinks: a link to
//! `/dev/zero` is a character device) and refuses anything but a regular file.
//! [`RegularFile::read_all`] then holds its length to what the format allows and to the
//! memory budget before a byte is read, and reads at most that length (a file that grows
//! meanwhile is an error, never a longer read). Every error names the key and the path.
//!
//! ```
//! use resilab_limits::{FileError, read_regular};
//!
//! let e = read_regular("injection_sequence_path", "/dev/zero".as_ref(), 1 << 20, "a log").unwrap_err();
//! assert!(matches!(e, FileError::NotRegular { .. }));
//! assert_eq!(e.to_string(), "injection_sequence_path: /dev/zero is a character device, not a regular file");
//! ```

use std::fs::File;
use std::io::{Read, Seek};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::human_bytes;

/// The largest configuration file read (a TOML run or campaign configuration, a YAML or TOML
/// injection configuration): resilab's own are a few kilobytes.
pub const CONFIG_MAX_BYTES: u64 = 16 << 20;

/// Why a named file was not read. Each variant names the key (or the role of the file) and the
/// path.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be opened (missing, no permission).
    #[error("{key}: cannot open {path}: {error}", path = .path.display())]
    Open {
        /// The key or role that names the file.
        key: String,
        /// The file.
        path: PathBuf,
        /// The system's reason.
        error: std::io::Error,
    },
    /// The path is a FIFO, a device, a socket or a directory.
    #[error("{key}: {path} is {kind}, not a regular file", path = .path.display())]
    NotRegular {
        /// The key or role that names the file.
        key: String,
        /// The file.
        path: PathBuf,
        /// What it is instead (`a FIFO (named pipe)`, `a character device`, ...).
        kind: &'static str,
    },
    /// The file is longer than its format allows.
    #[error("{key}: {path} is {len} bytes, more than {allowed}", path = .path.display())]
    TooLong {
        /// The key or role that names the file.
        key: String,
        /// The file.
        path: PathBuf,
        /// Its length when opened.
        len: u64,
        /// What its format allows, in words with the figure.
        allowed: String,
    },
    /// Reading the file would take more memory than the budget leaves.
    #[error("{key}: {path} is {len} bytes ({human}), more than the memory budget of {budget}", path = .path.display(), human = human_bytes(*.len))]
    OverBudget {
        /// The key or role that names the file.
        key: String,
        /// The file.
        path: PathBuf,
        /// Its length when opened.
        len: u64,
        /// The budget, described.
        budget: String,
    },
    /// Reading failed, or the file changed length while it was read.
    #[error("{key}: cannot read {path}: {message}", path = .path.display())]
    Read {
        /// The key or role that names the file.
        key: String,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The memory budget itself is unusable (`RESILAB_MAX_MEMORY` is not a size).
    #[error(transparent)]
    Budget(#[from] crate::Error),
}

/// A regular file, open for reading, with its length when it was opened.
#[derive(Debug)]
pub struct RegularFile {
    file: File,
    len: u64,
    key: String,
    path: PathBuf,
}

impl RegularFile {
    /// Opens `path`, which `key` names (a configuration key such as `injection_sequence_path`,
    /// or a role such as `data.path: CIFAR-10 batch`), as a regular file. Opening never blocks
    /// (a FIFO is opened non-blocking and then refused) and only a regular file is kept.
    pub fn open(key: &str, path: &Path) -> Result<Self, FileError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(|error| FileError::Open { key: key.to_string(), path: path.to_path_buf(), error })?;
        let meta = file.metadata().map_err(|e| read_error(key, path, e.to_string()))?;
        let kind = meta.file_type();
        if !kind.is_file() {
            let kind = if kind.is_fifo() {
                "a FIFO (named pipe)"
            } else if kind.is_char_device() {
                "a character device"
            } else if kind.is_block_device() {
                "a block device"
            } else if kind.is_socket() {
                "a socket"
            } else if kind.is_dir() {
                "a directory"
            } else {
                "not a file"
            };
            return Err(FileError::NotRegular { key: key.to_string(), path: path.to_path_buf(), kind });
        }
        Ok(Self { file, len: meta.len(), key: key.to_string(), path: path.to_path_buf() })
    }

    /// The file's length when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file was empty when it was opened.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key or role that names the file.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Up to `n` bytes from the start of the file (fewer if it is shorter), to read a header
    /// before deciding how much the whole may be.
    pub fn head(&mut self, n: u64) -> Result<Vec<u8>, FileError> {
        let mut out = Vec::new();
        self.file.rewind().map_err(|e| self.error(e))?;
        (&mut self.file).take(n.min(self.len)).read_to_end(&mut out).map_err(|e| self.error(e))?;
        Ok(out)
    }

    /// Checks that the file is at most `max` bytes (`allowed` says what allows that many, e.g.
    /// `"a CIFAR-10 batch (10000 records of 3073 bytes)"`) and fits the memory budget, then
    /// reads it whole from its start. At most its length when opened is read: a file that grew
    /// since is an error, one that shrank gives what it holds.
    pub fn read_all(mut self, max: u64, allowed: &str) -> Result<Vec<u8>, FileError> {
        self.check(max, allowed)?;
        let capacity = usize::try_from(self.len).map_err(|_| self.error("too long for this machine's address space"))?;
        let mut out = Vec::with_capacity(capacity);
        self.file.rewind().map_err(|e| self.error(e))?;
        (&mut self.file).take(self.len).read_to_end(&mut out).map_err(|e| self.error(e))?;
        let mut more = [0u8; 1];
        if self.file.read(&mut more).map_err(|e| self.error(e))? > 0 {
            return Err(self.error(format!("it grew while it was read (it was {} bytes when opened)", self.len)));
        }
        Ok(out)
    }

    /// [`RegularFile::read_all`], as UTF-8 text.
    pub fn read_text(self, max: u64, allowed: &str) -> Result<String, FileError> {
        let (key, path) = (self.key.clone(), self.path.clone());
        let bytes = self.read_all(max, allowed)?;
        String::from_utf8(bytes)
            .map_err(|e| read_error(&key, &path, format!("it is not UTF-8 text (byte {})", e.utf8_error().valid_up_to())))
    }

    /// Checks the length against `max` and the memory budget, before anything is read.
    pub fn check(&self, max: u64, allowed: &str) -> Result<(), FileError> {
        if self.len > max {
            let allowed = format!("{allowed} allows ({max} bytes)");
            return Err(FileError::TooLong { key: self.key.clone(), path: self.path.clone(), len: self.len, allowed });
        }
        let budget = crate::memory_budget()?;
        if !budget.admits(Some(self.len)) {
            return Err(FileError::OverBudget { key: self.key.clone(), path: self.path.clone(), len: self.len, budget: budget.describe() });
        }
        Ok(())
    }

    /// The file's handle, for a reader that bounds what it reads itself (wrap it in
    /// [`Read::take`]).
    pub fn into_file(self) -> File {
        self.file
    }

    fn error(&self, e: impl ToString) -> FileError {
        read_error(&self.key, &self.path, e.to_string())
    }
}

fn read_error(key: &str, path: &Path, message: String) -> FileError {
    FileError::Read { key: key.to_string(), path: path.to_path_buf(), message }
}

/// Reads the regular file `path`, which `key` names, if it is at most `max` bytes (`allowed`
/// says what allows that many) and fits the memory budget (see [`RegularFile`]).
pub fn read_regular(key: &str, path: &Path, max: u64, allowed: &str) -> Result<Vec<u8>, FileError> {
    RegularFile::open(key, path)?.read_all(max, allowed)
}

/// Reads a configuration file (TOML or YAML) that `key` names, as text: a regular file of at
/// most [`CONFIG_MAX_BYTES`] within the memory budget.
pub fn read_config(key: &str, path: &Path) -> Result<String, FileError> {
    RegularFile::open(key, path)?.read_text(CONFIG_MAX_BYTES, "a configuration file")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_fifo_is_refused_at_once_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(status.success());
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        // A blocking open would hang this thread; the test then fails on the time limit.
        std::thread::spawn(move || tx.send(read_regular("injection_sequence_path", &path, 1 << 20, "a log")));
        let e = rx.recv_timeout(Duration::from_secs(10)).expect("opening a FIFO must not block").unwrap_err();
        assert!(matches!(e, FileError::NotRegular { kind: "a FIFO (named pipe)", .. }), "{e}");
        let text = e.to_string();
        assert!(text.starts_with("injection_sequence_path: ") && text.contains("fifo is a FIFO"), "{text}");
    }

    #[test]
    fn devices_are_refused_directly_and_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("data_batch_1.bin");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        for p in [Path::new("/dev/zero"), link.as_path(), Path::new("/dev/null")] {
            let t = Instant::now();
            let e = read_regular("k", p, u64::MAX, "x").unwrap_err();
            assert!(matches!(e, FileError::NotRegular { kind: "a character device", .. }), "{p:?}: {e}");
            assert!(e.to_string().contains(&p.display().to_string()), "{e}");
            assert!(t.elapsed() < Duration::from_secs(1));
        }
        let e = read_regular("k", dir.path(), u64::MAX, "x").unwrap_err();
        assert!(matches!(e, FileError::NotRegular { kind: "a directory", .. }), "{e}");
        let e = read_regular("k", &dir.path().join("missing"), u64::MAX, "x").unwrap_err();
        assert!(matches!(e, FileError::Open { .. }) && e.to_string().starts_with("k: cannot open "), "{e}");
    }

    #[test]
    fn a_file_longer_than_its_format_allows_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.bin");
        // A sparse file of 4 GiB: refused from its length, never read (which would take seconds
        // and gigabytes).
        File::create(&p).unwrap().set_len(4 << 30).unwrap();
        let t = Instant::now();
        let e = read_regular("data.path", &p, 30_730_000, "a CIFAR-10 batch").unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(
            e.to_string(),
            format!("data.path: {} is 4294967296 bytes, more than a CIFAR-10 batch allows (30730000 bytes)", p.display())
        );
        // The memory budget applies whatever the format allows (RESILAB_MAX_MEMORY is not set
        // in unit tests: half of the machine's memory, which is below 2^62).
        let f = RegularFile { file: File::open(&p).unwrap(), len: 1 << 62, key: "k".into(), path: p.clone() };
        let e = f.read_all(u64::MAX, "x").unwrap_err();
        assert!(matches!(e, FileError::OverBudget { .. }) && e.to_string().contains("more than the memory budget"), "{e}");
    }

    #[test]
    fn a_regular_file_is_read_whole_and_a_grown_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.yaml");
        std::fs::write(&p, "seed: 3\n").unwrap();
        assert_eq!(read_config("--config", &p).unwrap(), "seed: 3\n");
        let mut f = RegularFile::open("k", &p).unwrap();
        assert_eq!((f.len(), f.head(4).unwrap()), (8, b"seed".to_vec()));
        assert_eq!(f.read_all(8, "x").unwrap(), b"seed: 3\n");
        let f = RegularFile::open("k", &p).unwrap();
        std::fs::write(&p, "seed: 3\nmore: 1\n").unwrap();
        let e = f.read_all(100, "x").unwrap_err();
        assert!(e.to_string().contains("grew while it was read (it was 8 bytes when opened)"), "{e}");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        let e = read_config("--config", &p).unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
    }
}
