//! `samples.csv` (`train --record-samples`): the training images each worker reads at each
//! step, so that another framework can train on the same per-rank batches (scripts/ddp_check.py
//! does, against PyTorch's own distributed training).

use std::fs::File;
use std::path::{Path, PathBuf};

use resilab_train::Trainer;
use serde::{Deserialize, Serialize};

use crate::{Result, csv_err, io};

/// One row of `samples.csv`: at step `step`, worker `worker` reads training image `sample`
/// (its index in the training split) as the `position`-th image of its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleRow {
    pub step: u64,
    pub worker: usize,
    pub position: usize,
    pub sample: usize,
}

/// The open `samples.csv`, and the last step it holds.
pub(crate) struct SampleLog {
    path: PathBuf,
    writer: resilab_text::CsvWriter<File>,
    through: u64,
}

impl SampleLog {
    /// Opens `path` for a run at step `step`. A resumed run (`resumed`) keeps the rows of the
    /// steps up to its checkpoint and drops the later ones, which it will read again.
    pub(crate) fn open(path: &Path, step: u64, resumed: bool) -> Result<Self> {
        let kept = if resumed && path.exists() { read(path)?.into_iter().filter(|r| r.step <= step).collect() } else { Vec::new() };
        // The header is written here, so that a run of no steps leaves a file pandas reads.
        let mut writer = resilab_text::CsvWriter::without_headers(crate::files::create_output(path)?);
        writer.write_record(["step", "worker", "position", "sample"]).map_err(csv_err(path))?;
        for row in &kept {
            writer.serialize(row).map_err(csv_err(path))?;
        }
        writer.flush().map_err(io(path))?;
        Ok(Self { path: path.to_path_buf(), writer, through: step })
    }

    /// Records what the trainer's next step reads, unless that step is recorded already (a
    /// step repeated after a restart reads the same images).
    pub(crate) fn record(&mut self, trainer: &mut Trainer) -> Result<()> {
        let step = trainer.step + 1;
        if step <= self.through {
            return Ok(());
        }
        for (worker, shard) in trainer.next_shards().into_iter().enumerate() {
            for (position, &sample) in shard.iter().enumerate() {
                self.writer.serialize(SampleRow { step, worker, position, sample }).map_err(csv_err(&self.path))?;
            }
        }
        self.writer.flush().map_err(io(&self.path))?;
        self.through = step;
        Ok(())
    }
}

/// Every row of a `samples.csv`.
pub fn read(path: &Path) -> Result<Vec<SampleRow>> {
    let mut reader = csv::Reader::from_path(path).map_err(csv_err(path))?;
    resilab_text::csv_rows(&mut reader).map_err(csv_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(steps: u64) -> Vec<SampleRow> {
        (1..=steps)
            .flat_map(|step| (0..2).map(move |w| SampleRow { step, worker: w, position: 0, sample: (10 * step) as usize + w }))
            .collect()
    }

    #[test]
    fn a_resumed_log_keeps_the_steps_up_to_its_checkpoint_and_a_new_one_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut w = csv::Writer::from_path(&path).unwrap();
        for r in rows(5) {
            w.serialize(r).unwrap();
        }
        w.flush().unwrap();
        drop(SampleLog::open(&path, 3, true).unwrap());
        assert_eq!(read(&path).unwrap(), rows(3));
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().next(), Some("step,worker,position,sample"));
        drop(SampleLog::open(&path, 0, false).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "step,worker,position,sample\n");
    }
}
