//! CIFAR-10 binary version: `data_batch_1.bin` .. `data_batch_5.bin` and `test_batch.bin`, each
//! a sequence of 3073-byte records (one label byte, then 1024 red, 1024 green and 1024 blue
//! pixels of a 32x32 image).

use std::path::{Path, PathBuf};

use resilab_limits::RegularFile;

use crate::{Dataset, Error, Result};

const RECORD: usize = 1 + 3 * 32 * 32;

/// The training files, in order.
pub const TRAIN_FILES: [&str; 5] = ["data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"];
/// The test file.
pub const TEST_FILE: &str = "test_batch.bin";

/// Finds the directory holding the batches: `dir` itself or its `cifar-10-batches-bin`
/// subdirectory (where the official archive unpacks).
fn batches_dir(dir: &Path) -> PathBuf {
    let nested = dir.join("cifar-10-batches-bin");
    if !dir.join(TEST_FILE).exists() && nested.join(TEST_FILE).exists() { nested } else { dir.to_path_buf() }
}

/// Records in one batch file of the official archive: a file may hold fewer, never more.
pub const BATCH_RECORDS: usize = 10_000;

/// Parses the records of one batch file into `out`. The file must be a regular file (never a
/// FIFO or a device) of at most [`BATCH_RECORDS`] records, and is read no further.
pub fn read_batch(path: &Path, out: &mut Dataset) -> Result<()> {
    let max = (BATCH_RECORDS * RECORD) as u64;
    let allowed = format!("a CIFAR-10 batch ({BATCH_RECORDS} records of {RECORD} bytes)");
    let bytes = RegularFile::open("data.path", path)?.read_all(max, &allowed)?;
    if bytes.is_empty() || bytes.len() % RECORD != 0 {
        return Err(Error::Format {
            path: path.to_path_buf(),
            message: format!(
                "{} bytes is not a whole number of {RECORD}-byte CIFAR-10 records (truncated or not a CIFAR-10 binary batch)",
                bytes.len()
            ),
        });
    }
    for (i, rec) in bytes.chunks_exact(RECORD).enumerate() {
        if rec[0] >= 10 {
            return Err(Error::Format {
                path: path.to_path_buf(),
                message: format!("record {i} has label {} (CIFAR-10 labels are 0-9)", rec[0]),
            });
        }
        out.labels.push(rec[0]);
        out.images.extend_from_slice(&rec[1..]);
    }
    Ok(())
}

fn empty() -> Dataset {
    Dataset { images: Vec::new(), labels: Vec::new(), channels: 3, size: 32, classes: 10 }
}

/// Reads the training and test sets from `dir`. With `train_size`, only the training batches
/// that hold its first `train_size` images are read, in order: `data_batch_1.bin` alone for up
/// to its 10,000 images, and the files after the last one needed need not exist. Without it,
/// all five.
pub fn load(dir: &Path, train_size: Option<usize>) -> Result<(Dataset, Dataset)> {
    let dir = batches_dir(dir);
    let mut train = empty();
    let wanted = train_size.unwrap_or(usize::MAX);
    for f in TRAIN_FILES {
        if train.len() >= wanted {
            break;
        }
        read_batch(&dir.join(f), &mut train)?;
    }
    let mut test = empty();
    read_batch(&dir.join(TEST_FILE), &mut test)?;
    Ok((train, test))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_records_and_rejects_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        for label in [3u8, 7] {
            bytes.push(label);
            bytes.extend(std::iter::repeat_n(label * 10, RECORD - 1));
        }
        let p = dir.path().join(TEST_FILE);
        std::fs::write(&p, &bytes).unwrap();
        let mut d = empty();
        read_batch(&p, &mut d).unwrap();
        assert_eq!(d.labels, vec![3, 7]);
        assert_eq!(d.images[RECORD - 2], 30);
        assert_eq!(d.images[RECORD - 1], 70);

        std::fs::write(&p, &bytes[..RECORD + 100]).unwrap();
        let err = read_batch(&p, &mut empty()).unwrap_err().to_string();
        assert!(err.contains("test_batch.bin") && err.contains("truncated"), "{err}");
    }

    #[test]
    fn a_device_a_fifo_and_an_oversized_batch_are_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(TEST_FILE);
        std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
        let err = read_batch(&p, &mut empty()).unwrap_err().to_string();
        assert!(err.contains("test_batch.bin is a character device, not a regular file"), "{err}");
        std::fs::remove_file(&p).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(&p).status().unwrap().success());
        let err = read_batch(&p, &mut empty()).unwrap_err().to_string();
        assert!(err.contains("test_batch.bin is a FIFO"), "{err}");
        std::fs::remove_file(&p).unwrap();
        // One record more than a batch holds, sparse: refused from its length.
        std::fs::File::create(&p).unwrap().set_len(((BATCH_RECORDS + 1) * RECORD) as u64).unwrap();
        let err = read_batch(&p, &mut empty()).unwrap_err().to_string();
        assert!(err.contains("30733073 bytes, more than a CIFAR-10 batch (10000 records of 3073 bytes) allows (30730000 bytes)"), "{err}");
    }

    #[test]
    fn missing_file_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let err = load(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("data_batch_1.bin"), "{err}");
    }

    /// Writes `records` records labelled `label` to `dir/name`.
    fn batch(dir: &Path, name: &str, records: usize, label: u8) {
        let mut bytes = Vec::new();
        for _ in 0..records {
            bytes.push(label);
            bytes.extend(std::iter::repeat_n(label, RECORD - 1));
        }
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    #[test]
    fn a_train_size_reads_only_the_batches_that_hold_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        batch(d, TRAIN_FILES[0], 3, 1);
        batch(d, TRAIN_FILES[1], 3, 2);
        batch(d, TEST_FILE, 2, 9);
        // Batches 3 to 5 are missing: a size the first two hold reads those two, in order.
        let (train, test) = load(d, Some(3)).unwrap();
        assert_eq!((train.labels, test.labels), (vec![1, 1, 1], vec![9, 9]));
        let (train, _) = load(d, Some(5)).unwrap();
        assert_eq!(train.labels, [1, 1, 1, 2, 2, 2], "whole batches are read; the caller keeps the first 5");
        // More than they hold needs the third, and says so; so does no size at all.
        for size in [Some(7), None] {
            let err = load(d, size).unwrap_err().to_string();
            assert!(err.contains("data_batch_3.bin"), "{size:?}: {err}");
        }
    }
}
