//! A golden run's step cache, what lets a faulty run of the same configuration skip the steps
//! before its first fault (docs/campaigns.md, "Shortcuts").
//!
//! A golden run trained with [`crate::RunOptions::record_steps`] writes, after each completed
//! step, its full training state (`full/step-N`, a checkpoint of every worker) and one row of
//! `steps.csv`: what the step reported and what the run's accounting read from the trainer
//! then. The csv crate writes each `f64` as its shortest text that reads back to the same bits.

use std::fs::File;
use std::path::{Path, PathBuf};

use resilab_train::{Evaluation, HostTensor, StepStats, TrainState, Trainer, Worker};
use serde::{Deserialize, Serialize};

use crate::{Error, Result, csv_err, io};

/// The cache's table of steps, in a golden run's directory.
pub const STEPS_CSV: &str = "steps.csv";
/// The cache's full states, in a golden run's directory.
pub const FULL_DIR: &str = "full";

/// One golden step as the run accounted for it: a row of `steps.csv`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct StepRecord {
    pub(crate) step: u64,
    pub(crate) epoch: usize,
    /// The step completed an epoch ([`StepStats::epoch_end`]).
    pub(crate) epoch_end: bool,
    /// After the step, the data cursor stood at an epoch's start.
    pub(crate) epoch_start: bool,
    pub(crate) loss: f64,
    pub(crate) train_acc: f64,
    pub(crate) lr: f64,
    /// The step's simulated seconds before any attempt charge (a golden run never redoes and
    /// copies nothing).
    pub(crate) sim_s: f64,
    pub(crate) comm_s: f64,
    pub(crate) comm_bytes: u64,
    /// The largest worker's state bytes before the step (what an undoing strategy copies).
    pub(crate) snapshot_bytes: u64,
    /// All workers' state bytes after the step (what a checkpoint then writes).
    pub(crate) state_bytes: u64,
    /// Every replica's parameters had one digest after the step (what the divergence
    /// detector compares).
    pub(crate) replicas_agree: bool,
    /// The test accuracy of the evaluation after the step, when there was one.
    pub(crate) test_acc: Option<f64>,
    /// Its test loss.
    pub(crate) test_loss: Option<f64>,
    /// [`state_digest`] of the full state after the step (what the remainder shortcut compares
    /// a run's state with); absent in a cache recorded before it was kept.
    #[serde(default)]
    pub(crate) state_digest: Option<u64>,
}

impl StepRecord {
    /// The step's statistics as the trainer returned them, before the attempt charges.
    pub(crate) fn stats(&self) -> StepStats {
        StepStats {
            step: self.step,
            epoch: self.epoch,
            loss: self.loss,
            train_acc: self.train_acc,
            lr: self.lr,
            epoch_end: self.epoch_end,
            sim_s: self.sim_s,
            comm_s: self.comm_s,
            comm_bytes: self.comm_bytes,
            ..StepStats::default()
        }
    }

    /// The evaluation after the step, when there was one.
    pub(crate) fn eval(&self) -> Option<Evaluation> {
        Some(Evaluation { accuracy: self.test_acc?, loss: self.test_loss? })
    }
}

/// The largest worker's state bytes: what an undoing strategy copies before a step.
pub(crate) fn snapshot_bytes(trainer: &Trainer) -> u64 {
    trainer.workers.iter().map(Worker::state_bytes).max().unwrap_or(0)
}

/// A digest of every bit of a training state: its step and, per worker, the rank, parameters
/// and buffers, optimizer state, random stream and data cursor.
pub(crate) fn state_digest(state: &TrainState) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&state.step.to_le_bytes());
    for w in &state.workers {
        for x in [w.rank as u128, u128::from(w.rng.stream), w.rng.word_pos, w.cursor.epoch as u128, w.cursor.sample as u128] {
            h.update(&x.to_le_bytes());
        }
        h.update(&w.rng.seed);
        if let Some(sc) = w.scaler {
            h.update(&sc.scale.to_bits().to_le_bytes());
            h.update(&sc.growth_tracker.to_le_bytes());
        }
        for (name, t) in &w.params {
            digest_tensor(&mut h, name, t);
        }
        for (name, p) in &w.optim {
            h.update(&p.step.to_le_bytes());
            for (buffer, t) in &p.buffers {
                digest_tensor(&mut h, &format!("{name}/{buffer}"), t);
            }
        }
    }
    h.digest()
}

fn digest_tensor(h: &mut xxhash_rust::xxh3::Xxh3, name: &str, t: &HostTensor) {
    h.update(&(name.len() as u64).to_le_bytes());
    h.update(name.as_bytes());
    h.update(&(t.shape.len() as u64).to_le_bytes());
    for &d in &t.shape {
        h.update(&(d as u64).to_le_bytes());
    }
    for v in &t.values {
        h.update(&v.to_bits().to_le_bytes());
    }
}

/// Whether two training states hold the same bits (a NaN equals the same NaN; 0.0 differs from
/// -0.0), where `TrainState`'s `==` compares values.
pub(crate) fn same_bits(a: &TrainState, b: &TrainState) -> bool {
    let tensor = |x: &HostTensor, y: &HostTensor| {
        x.shape == y.shape && x.values.len() == y.values.len() && x.values.iter().zip(&y.values).all(|(p, q)| p.to_bits() == q.to_bits())
    };
    let tensors = |x: &std::collections::BTreeMap<String, HostTensor>, y: &std::collections::BTreeMap<String, HostTensor>| {
        x.len() == y.len() && x.iter().zip(y).all(|((n, p), (m, q))| n == m && tensor(p, q))
    };
    a.step == b.step
        && a.workers.len() == b.workers.len()
        && a.workers.iter().zip(&b.workers).all(|(v, w)| {
            (v.rank, v.rng, v.cursor) == (w.rank, w.rng, w.cursor)
                && v.scaler.map(|s| (s.scale.to_bits(), s.growth_tracker)) == w.scaler.map(|s| (s.scale.to_bits(), s.growth_tracker))
                && tensors(&v.params, &w.params)
                && v.optim.len() == w.optim.len()
                && v.optim.iter().zip(&w.optim).all(|((n, p), (m, q))| n == m && p.step == q.step && tensors(&p.buffers, &q.buffers))
        })
}

/// Writes a golden run's cache as it trains.
pub(crate) struct StepLog {
    path: PathBuf,
    full: PathBuf,
    file: resilab_text::CsvWriter<File>,
    meta: resilab_checkpoint::Meta,
}

impl StepLog {
    /// Starts the cache in the run's directory `out`.
    pub(crate) fn open(out: &Path, meta: resilab_checkpoint::Meta) -> Result<Self> {
        let path = out.join(STEPS_CSV);
        let file = resilab_text::CsvWriter::from_writer(crate::files::create_output(&path)?);
        Ok(Self { full: out.join(FULL_DIR), path, file, meta })
    }

    /// Records step `s` just completed (the trainer after it), `before` the largest worker's
    /// state bytes before it and `eval` its evaluation.
    pub(crate) fn record(&mut self, trainer: &Trainer, s: &StepStats, before: u64, eval: Option<Evaluation>) -> Result<()> {
        let state = trainer.snapshot();
        resilab_checkpoint::save(&self.full, &state, &self.meta)?;
        let digests: Vec<u64> = trainer.workers.iter().map(|w| resilab_recovery::detect::digest(&w.net)).collect();
        let r = StepRecord {
            step: s.step,
            epoch: s.epoch,
            epoch_end: s.epoch_end,
            epoch_start: s.step > 0 && trainer.workers[0].cursor.sample == 0,
            loss: s.loss,
            train_acc: s.train_acc,
            lr: s.lr,
            sim_s: s.sim_s,
            comm_s: s.comm_s,
            comm_bytes: s.comm_bytes,
            snapshot_bytes: before,
            state_bytes: trainer.state_bytes(),
            replicas_agree: digests.windows(2).all(|p| p[0] == p[1]),
            test_acc: eval.map(|e| e.accuracy),
            test_loss: eval.map(|e| e.loss),
            state_digest: Some(state_digest(&state)),
        };
        self.file.serialize(&r).map_err(csv_err(&self.path))?;
        self.file.flush().map_err(io(&self.path))
    }
}

/// A finished golden run's cache.
pub(crate) struct StepCache {
    /// Step `k`'s record at index `k - 1`.
    pub(crate) records: Vec<StepRecord>,
    /// The directory of the full states.
    pub(crate) full: PathBuf,
    /// Detections the golden run met.
    pub(crate) detections: usize,
}

impl StepCache {
    /// The cache of the golden run in `dir`; `Ok(None)` when it has none (a run recorded without
    /// it, or by an earlier revision). A cache that does not read is an error.
    pub(crate) fn open(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(STEPS_CSV);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Io { path, source }),
        };
        let bad = |what: String| Error::Golden(format!("{}: {what}", path.display()));
        let mut records: Vec<StepRecord> = Vec::new();
        for row in csv::Reader::from_reader(file).deserialize() {
            let r: StepRecord = row.map_err(|e| bad(format!("row {} does not read: {e}", records.len() + 1)))?;
            if r.step != records.len() as u64 + 1 {
                return Err(bad(format!("row {} is step {}", records.len() + 1, r.step)));
            }
            records.push(r);
        }
        let summary = dir.join("summary.json");
        let text = std::fs::read(&summary).map_err(io(&summary))?;
        let v: serde_json::Value =
            serde_json::from_slice(&text).map_err(|source| Error::Json { what: summary.display().to_string(), source })?;
        let detections = v["detections"].as_array().map_or(usize::MAX, Vec::len);
        Ok(Some(Self { records, full: dir.join(FULL_DIR), detections }))
    }

    /// The directory of the full state after step `step`.
    pub(crate) fn state_dir(&self, step: u64) -> PathBuf {
        self.full.join(resilab_checkpoint::dir_name(step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_bit_for_bit() {
        let r = StepRecord {
            step: 7,
            epoch: 1,
            epoch_end: true,
            epoch_start: true,
            loss: 0.1 + 0.2,
            train_acc: 1.0 / 3.0,
            lr: f64::MIN_POSITIVE,
            sim_s: 1e-300,
            comm_s: f64::NAN,
            comm_bytes: u64::MAX,
            snapshot_bytes: 12,
            state_bytes: 48,
            replicas_agree: false,
            test_acc: Some(0.1 * 3.0),
            test_loss: Some(f64::INFINITY),
            state_digest: Some(u64::MAX),
        };
        let d = tempfile::tempdir().unwrap();
        let none = StepRecord { step: 8, test_acc: None, test_loss: None, ..r.clone() };
        let mut w = csv::Writer::from_path(d.path().join(STEPS_CSV)).unwrap();
        w.serialize(&r).unwrap();
        w.serialize(&none).unwrap();
        w.flush().unwrap();
        let rows: Vec<StepRecord> = csv::Reader::from_path(d.path().join(STEPS_CSV)).unwrap().deserialize().map(|r| r.unwrap()).collect();
        let back = &rows[0];
        assert_eq!(back.loss.to_bits(), r.loss.to_bits());
        assert_eq!(back.train_acc.to_bits(), r.train_acc.to_bits());
        assert_eq!(back.lr.to_bits(), r.lr.to_bits());
        assert_eq!(back.sim_s.to_bits(), r.sim_s.to_bits());
        assert!(back.comm_s.is_nan());
        assert_eq!(back.eval().map(|e| e.accuracy.to_bits()), r.eval().map(|e| e.accuracy.to_bits()));
        assert_eq!(back.eval().map(|e| e.loss), Some(f64::INFINITY));
        assert_eq!((back.step, back.epoch, back.comm_bytes, back.snapshot_bytes, back.state_bytes), (7, 1, u64::MAX, 12, 48));
        assert!(back.epoch_end && back.epoch_start && !back.replicas_agree);
        assert_eq!(rows[1].eval(), None);
        // A cache that does not read is an error naming its row.
        std::fs::write(d.path().join(STEPS_CSV), "step,epoch\n1,2\n").unwrap();
        let e = StepCache::open(d.path()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("row 1 does not read"), "{e}");
    }

    #[test]
    fn a_state_digest_and_same_bits_see_every_bit() {
        let tensor = |values: Vec<f32>| HostTensor { shape: vec![values.len()], values };
        let worker = resilab_train::WorkerState {
            rank: 0,
            params: [("w".to_string(), tensor(vec![1.0, f32::NAN, 0.0]))].into(),
            optim: [(
                "w".to_string(),
                resilab_train::HostParamState { step: 3, buffers: [("momentum_buffer".to_string(), tensor(vec![0.5; 3]))].into() },
            )]
            .into(),
            rng: resilab_train::RngState { seed: [7; 32], stream: 1, word_pos: 40 },
            cursor: resilab_train::Cursor { epoch: 0, sample: 64 },
            scaler: Some(resilab_train::ScalerState { scale: 65536.0, growth_tracker: 3 }),
        };
        let a = TrainState { step: 5, workers: vec![worker.clone(), resilab_train::WorkerState { rank: 1, ..worker }] };
        assert!(same_bits(&a, &a.clone()), "a NaN equals the same NaN");
        assert_ne!(a, a.clone(), "where == never finds a NaN equal");
        assert_eq!(state_digest(&a), state_digest(&a.clone()));
        let mut changes: Vec<TrainState> = Vec::new();
        let mut b = a.clone();
        // 0.0 == -0.0 as values.
        b.workers[1].params.get_mut("w").unwrap().values[2] = -0.0;
        changes.push(b);
        let mut b = a.clone();
        b.workers[0].optim.get_mut("w").unwrap().buffers.get_mut("momentum_buffer").unwrap().values[0] =
            f32::from_bits(0.5f32.to_bits() ^ 1);
        changes.push(b);
        let mut b = a.clone();
        b.workers[1].rng.word_pos += 1;
        changes.push(b);
        let mut b = a.clone();
        b.workers[0].cursor.sample = 0;
        changes.push(b);
        let mut b = a.clone();
        b.step = 6;
        changes.push(b);
        for scaler in [None, Some(resilab_train::ScalerState { scale: 32768.0, growth_tracker: 3 })] {
            let mut b = a.clone();
            b.workers[1].scaler = scaler;
            changes.push(b);
        }
        for b in &changes {
            assert!(!same_bits(&a, b), "{b:?}");
            assert_ne!(state_digest(&a), state_digest(b), "{b:?}");
        }
    }

    /// Step `step`'s record, with made-up values.
    fn record(step: u64) -> StepRecord {
        StepRecord {
            step,
            epoch: 0,
            epoch_end: false,
            epoch_start: false,
            loss: 2.0,
            train_acc: 0.25,
            lr: 0.05,
            sim_s: 0.5,
            comm_s: 0.0,
            comm_bytes: 0,
            snapshot_bytes: 8,
            state_bytes: 8,
            replicas_agree: true,
            test_acc: None,
            test_loss: None,
            state_digest: Some(step),
        }
    }

    /// Writes `steps` as the cache's table in `dir`.
    fn write_steps(dir: &Path, steps: &[u64]) {
        let mut w = csv::Writer::from_path(dir.join(STEPS_CSV)).unwrap();
        for &s in steps {
            w.serialize(record(s)).unwrap();
        }
        w.flush().unwrap();
    }

    /// A golden run recorded without `record_steps` (its summary and metrics, no `steps.csv`)
    /// has no cache; with its table it has one, which holds the records in order and the
    /// detections the summary lists; a table that skips a step is an error naming the row.
    #[test]
    fn a_golden_run_without_a_cache_has_none() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("summary.json"), r#"{"status": "ok", "detections": [{"step": 2}]}"#).unwrap();
        std::fs::write(d.path().join("metrics.csv"), "step,loss\n1,2.0\n2,1.9\n").unwrap();
        assert!(StepCache::open(d.path()).unwrap().is_none(), "no steps.csv, no cache");
        write_steps(d.path(), &[1, 2]);
        let cache = StepCache::open(d.path()).unwrap().expect("the cache of a run that recorded its steps");
        assert_eq!(cache.records, [record(1), record(2)]);
        assert_eq!(cache.detections, 1);
        assert_eq!(cache.state_dir(2), d.path().join(FULL_DIR).join(resilab_checkpoint::dir_name(2)));
        write_steps(d.path(), &[1, 3]);
        let e = StepCache::open(d.path()).err().expect("a gap in the steps").to_string();
        assert!(e.contains(STEPS_CSV) && e.contains("row 2 is step 3"), "{e}");
    }
}
