//! Throughput measurement of full training steps (forward, backward, optimizer), on random
//! synthetic images, through the same [`Trainer`](resilab_train::Trainer) the runs use.

use std::sync::Arc;
use std::time::Instant;

use resilab_data::{DataConfig, Split};
use resilab_models::Compute;
use resilab_models::{InputShape, ModelConfig, Precision};
use resilab_train::{ParallelConfig, ParallelMode, Trainer};
use serde::Serialize;

use crate::{Error, Result, RunConfig};

/// One throughput measurement.
#[derive(Debug, Serialize)]
pub struct StepBench {
    /// `resilab`.
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    /// Architecture.
    pub arch: String,
    /// Depth (0 for AlexNet).
    pub depth: usize,
    /// Width multiplier.
    pub width: f64,
    /// BatchNorm present.
    pub batch_norm: bool,
    /// Trainable parameters.
    pub params: usize,
    /// Batch size.
    pub batch: usize,
    /// CPU threads.
    pub threads: usize,
    /// Backend name.
    pub backend: String,
    /// Device description.
    pub device: String,
    /// Median images per second.
    pub images_per_s: f64,
    /// Median step time in milliseconds.
    pub step_ms_median: f64,
    /// Training FLOPs per image: three times the forward pass's (convolutions and linear
    /// layers; the input and weight gradients each cost about what the forward pass does).
    pub train_gflop_per_image: f64,
    /// Achieved GFLOP/s: `train_gflop_per_image * images_per_s`.
    pub gflops: f64,
    /// The CPU's nominal f32 peak at `threads` cores ([`crate::platform::peak_gflops`]); absent
    /// where the clock is unknown, and on a GPU.
    pub peak_gflops: Option<f64>,
}

/// What [`train_step`] measured.
#[derive(Clone, Copy, Debug)]
pub struct StepTiming {
    /// Median seconds per step.
    pub median_s: f64,
    /// Trainable parameters.
    pub params: usize,
    /// Forward FLOPs per image (multiply-adds times two).
    pub forward_flops: u64,
}

/// A trainer for `model` on `batch` synthetic 3x32x32 images (one batch per epoch), default SGD
/// with momentum 0.9, for `steps` steps, and the configuration it was built from.
fn bench_trainer(
    model: &ModelConfig,
    batch: usize,
    steps: usize,
    parallel: ParallelConfig,
    compute: &Compute,
) -> Result<(RunConfig, Trainer)> {
    bench_trainer_in(model, batch, steps, parallel, compute, Precision::Fp32)
}

/// [`bench_trainer`] computing in `precision`.
fn bench_trainer_in(
    model: &ModelConfig,
    batch: usize,
    steps: usize,
    parallel: ParallelConfig,
    compute: &Compute,
    precision: Precision,
) -> Result<(RunConfig, Trainer)> {
    let data = DataConfig { train_size: Some(batch), test_size: Some(1), ..DataConfig::default() };
    let split: Arc<Split> = Arc::new(resilab_data::load(&data)?);
    let mut cfg = RunConfig::from_toml("[model]\narch = \"resnet\"\ndepth = 8\n", &[], "bench")?;
    cfg.model = model.clone();
    cfg.data = data;
    cfg.train.batch_size = batch;
    cfg.train.steps = Some(steps as u64);
    cfg.parallel = parallel;
    cfg.train.precision = precision;
    let trainer = crate::run::build_trainer(&cfg, split, compute)?;
    Ok((cfg, trainer))
}

/// Measures `steps` training steps (after `warmup` untimed ones) of `model` at batch `batch` on
/// 3x32x32 images, SGD with momentum 0.9.
pub fn train_step(model: &ModelConfig, batch: usize, warmup: usize, steps: usize, compute: &Compute) -> Result<StepTiming> {
    let (_, mut trainer) = bench_trainer(model, batch, warmup + steps, ParallelConfig::default(), compute)?;
    let net = trainer.model();
    let params = net.num_trainable();
    let forward_flops = net.block_costs(InputShape { channels: 3, size: 32 }).iter().map(|b| b.flops).sum();
    for _ in 0..warmup {
        trainer.step()?;
    }
    Ok(StepTiming { median_s: median_step(&mut trainer, steps)?, params, forward_flops })
}

/// Checkpoint throughput against a raw write of the same bytes, measured in one process.
#[derive(Debug, Serialize)]
pub struct CheckpointBench {
    /// Model label.
    pub model: String,
    /// Bytes of f32 values in the checkpoint (parameters, buffers and optimizer state).
    pub payload_bytes: usize,
    /// Size of the HDF5 file.
    pub file_bytes: u64,
    /// Median seconds to write the checkpoint (atomic: tmp, close, fsync, rename, fsync dir).
    pub write_s: f64,
    /// Median seconds to write the same bytes with `std::fs` (tmp, fsync, rename, fsync dir).
    pub raw_write_s: f64,
    /// [`CheckpointBench::raw_write_s`] with the early write-back resilab's writer uses: the
    /// disk's write-back started every 8 MiB written (the fair baseline for that technique).
    pub raw_early_write_s: f64,
    /// Median seconds to load and verify the checkpoint.
    pub read_s: f64,
    /// Median seconds to read the raw file back.
    pub raw_read_s: f64,
    /// Checkpoint write MB/s (payload).
    pub write_mb_s: f64,
    /// Raw write MB/s.
    pub raw_write_mb_s: f64,
    /// `write_mb_s / raw_write_mb_s`.
    pub write_vs_raw: f64,
    /// `raw_early_write_s / write_s`: the checkpoint against a raw write using the same early
    /// write-back.
    pub write_vs_raw_early: f64,
    /// Checkpoint read MB/s (payload, digests verified).
    pub read_mb_s: f64,
    /// Raw read MB/s.
    pub raw_read_mb_s: f64,
    /// Median training step time of the same model at batch `batch`.
    pub step_s: f64,
    /// Batch size of the step measurement.
    pub batch: usize,
    /// Checkpoint write time as a share of one training step.
    pub write_share_of_step: f64,
    /// Median seconds computing the XXH3 digests of all datasets on one thread. The writer
    /// computes them on a helper thread while it writes, so this is not part of `write_s`
    /// on a machine with two cores or more.
    pub digest_s: f64,
}

/// Median wall time of `steps` (at least one) training steps.
fn median_step(trainer: &mut Trainer, steps: usize) -> Result<f64> {
    let mut times = Vec::with_capacity(steps.max(1));
    for _ in 0..steps.max(1) {
        let t = Instant::now();
        trainer.step()?;
        times.push(t.elapsed().as_secs_f64());
    }
    Ok(median(times))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measures checkpoint write and read of `model`'s full training state (SGD momentum, after
/// The checkpoint root and the raw file of the checkpoint benchmark in `dir`, which must be new,
/// empty, or hold only what an earlier benchmark left there (nothing else is ever overwritten).
fn bench_dir(dir: &std::path::Path) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    const OWN: [&str; 3] = ["ckpt", "resilab-bench-raw.bin", "resilab-bench-raw.tmp"];
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for e in std::fs::read_dir(dir).map_err(io(dir))? {
        let name = e.map_err(io(dir))?.file_name();
        if !OWN.iter().any(|o| name == *o) {
            return Err(Error::Config(format!(
                "--dir {}: holds {} and other files this benchmark did not write; give a new or empty directory",
                dir.display(),
                name.to_string_lossy()
            )));
        }
    }
    Ok((dir.join("ckpt"), dir.join("resilab-bench-raw.bin")))
}

/// `steps` training steps at batch `batch`) in `dir`, `reps` times each, against raw writes.
pub fn checkpoint(
    model: &ModelConfig,
    batch: usize,
    steps: usize,
    reps: usize,
    dir: &std::path::Path,
    compute: &Compute,
) -> Result<CheckpointBench> {
    let (cfg, mut trainer) = bench_trainer(model, batch, steps + 1, ParallelConfig::default(), compute)?;
    trainer.step()?;
    let step_s = median_step(&mut trainer, steps)?;
    let state = trainer.snapshot();
    let meta = resilab_checkpoint::Meta { seed: cfg.seed, arch: model.label(), config: cfg.to_toml() };
    let (ckpt_root, raw_path) = bench_dir(dir)?;
    let payload: Vec<u8> = state_values(&state).flat_map(|v| v.iter().flat_map(|x| x.to_le_bytes())).collect();
    let (mut write, mut raw_write, mut raw_early, mut read, mut raw_read) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut ckpt_dir = ckpt_root.clone();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        ckpt_dir = resilab_checkpoint::save(&ckpt_root, &state, &meta)?;
        write.push(t.elapsed().as_secs_f64());
        raw_write.push(raw_write_s(&payload, &raw_path, dir, false)?);
        raw_early.push(raw_write_s(&payload, &raw_path, dir, true)?);
        let t = Instant::now();
        let (_loaded, _) =
            resilab_checkpoint::load_dir(&ckpt_dir, &state, resilab_checkpoint::OnMismatch::Error, &resilab_checkpoint::no_probe)?;
        read.push(t.elapsed().as_secs_f64());
        raw_read.push(raw_read_s(payload.len(), &raw_path)?);
    }
    let digest_s = median((0..reps.max(1)).map(|_| digest_s(&state)).collect());
    let file = ckpt_dir.join(resilab_checkpoint::file_name(0));
    let file_bytes = std::fs::metadata(&file).map_err(io(&file))?.len();
    let mb = payload.len() as f64 / 1e6;
    let (write_s, raw_write_s, read_s, raw_read_s) = (median(write), median(raw_write), median(read), median(raw_read));
    let raw_early_write_s = median(raw_early);
    Ok(CheckpointBench {
        model: model.label(),
        payload_bytes: payload.len(),
        file_bytes,
        write_s,
        raw_write_s,
        raw_early_write_s,
        write_vs_raw_early: raw_early_write_s / write_s,
        read_s,
        raw_read_s,
        write_mb_s: mb / write_s,
        raw_write_mb_s: mb / raw_write_s,
        write_vs_raw: raw_write_s / write_s,
        read_mb_s: mb / read_s,
        raw_read_mb_s: mb / raw_read_s,
        step_s,
        batch,
        write_share_of_step: write_s / step_s,
        digest_s,
    })
}

fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> crate::Error + use<> {
    let path = path.to_path_buf();
    move |source| crate::Error::Io { path, source }
}

/// Every parameter's and optimizer buffer's values of every worker, in the state's order.
fn state_values(state: &resilab_train::TrainState) -> impl Iterator<Item = &[f32]> {
    state.workers.iter().flat_map(|w| {
        let params = w.params.values().map(|t| t.values.as_slice());
        params.chain(w.optim.values().flat_map(|st| st.buffers.values().map(|t| t.values.as_slice())))
    })
}

/// Seconds to write `payload` to `path` as a checkpoint would: a temporary file, synced, renamed
/// into place, and the directory `dir` synced. With `early`, the file is written in chunks of
/// the checkpoint writer's write-back interval, starting the write-back after each.
fn raw_write_s(payload: &[u8], path: &std::path::Path, dir: &std::path::Path, early: bool) -> Result<f64> {
    use std::io::Write;
    let t = Instant::now();
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    if early {
        for chunk in payload.chunks(resilab_h5::WRITEBACK_EVERY_BYTES) {
            f.write_all(chunk).map_err(io(&tmp))?;
            resilab_h5::start_writeback(&f);
        }
    } else {
        f.write_all(payload).map_err(io(&tmp))?;
    }
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(path))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))?;
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds to read the `len` bytes of `path` back.
fn raw_read_s(len: usize, path: &std::path::Path) -> Result<f64> {
    use std::io::Read;
    let t = Instant::now();
    let mut buf = Vec::with_capacity(len);
    std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut buf)).map_err(io(path))?;
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds to digest every tensor of `state` (the digests a checkpoint stores).
fn digest_s(state: &resilab_train::TrainState) -> f64 {
    let t = Instant::now();
    let acc = state_values(state).fold(0u64, |acc, v| acc ^ resilab_h5::digest_f32(v));
    std::hint::black_box(acc);
    t.elapsed().as_secs_f64()
}

/// Simulation overhead of one parallel layout against one worker on the same global batch.
#[derive(Debug, Serialize)]
pub struct ParallelBench {
    /// Model label.
    pub model: String,
    /// Trainable parameters.
    pub params: usize,
    /// Global batch size.
    pub batch: usize,
    /// `single`, `data` or `pipeline`.
    pub layout: String,
    /// Data-parallel workers (1 otherwise).
    pub workers: usize,
    /// Pipeline stages (1 otherwise).
    pub stages: usize,
    /// Micro-batches (1 otherwise).
    pub micro_batches: usize,
    /// CPU threads.
    pub threads: usize,
    /// Backend name.
    pub backend: String,
    /// Device description.
    pub device: String,
    /// Timed steps per layout.
    pub steps: usize,
    /// Median wall time of one global step of the simulation.
    pub step_ms_median: f64,
    /// `step_ms_median` over the single worker's, measured in the same run.
    pub ratio_vs_single: f64,
    /// Median simulated step time on a parallel machine (cost model).
    pub sim_step_ms_median: f64,
    /// Median modelled communication time per step.
    pub comm_ms_median: f64,
    /// Median measured forward and backward time per step, all workers together.
    pub compute_ms_median: f64,
    /// Median measured optimizer time per step, all workers together.
    pub update_ms_median: f64,
    /// `compute_ms_median` over the single worker's: the cost of smaller shards.
    pub compute_ratio: f64,
}

impl ParallelBench {
    /// The header of [`ParallelBench::row`]'s table.
    pub fn header() -> String {
        format!(
            "{:<10} {:>7} {:>6} {:>6} {:>10} {:>7} {:>11} {:>9} {:>9} {:>12}",
            "layout", "workers", "stages", "micro", "step ms", "ratio", "compute ms", "ratio", "update ms", "sim step ms"
        )
    }

    /// The measurement as a table row.
    pub fn row(&self) -> String {
        format!(
            "{:<10} {:>7} {:>6} {:>6} {:>10.1} {:>7.3} {:>11.1} {:>9.3} {:>9.1} {:>12.1}",
            self.layout,
            self.workers,
            self.stages,
            self.micro_batches,
            self.step_ms_median,
            self.ratio_vs_single,
            self.compute_ms_median,
            self.compute_ratio,
            self.update_ms_median,
            self.sim_step_ms_median
        )
    }
}

/// Appends `rows` to the CSV file `path`, with a header line when the file is new.
pub fn append_csv(path: &std::path::Path, rows: &[ParallelBench]) -> Result<()> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let new = !path.exists();
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(io)?;
    let csv = |source| Error::Csv { path: path.to_path_buf(), source };
    let mut w = resilab_text::CsvWriter::new(file, new);
    for r in rows {
        w.serialize(r).map_err(csv)?;
    }
    w.flush().map_err(io)
}

/// A layout to measure: `(label, parallel section)`.
pub type Layout = (String, ParallelConfig);

/// The layouts of the overhead benchmark: one worker, `workers` data-parallel replicas each,
/// and `stages x micro_batches` pipelines.
pub fn layouts(workers: &[usize], pipelines: &[(usize, usize)]) -> Vec<Layout> {
    let mut out = vec![("single".to_string(), ParallelConfig::default())];
    for &n in workers {
        out.push(("data".to_string(), ParallelConfig { workers: n, ..ParallelConfig::default() }));
    }
    for &(s, m) in pipelines {
        out.push((
            "pipeline".to_string(),
            ParallelConfig { mode: ParallelMode::Pipeline, stages: s, micro_batches: m, ..ParallelConfig::default() },
        ));
    }
    out
}

/// Measures the step time of every layout on `model` at global batch `batch`: `warmup` untimed
/// steps each, then `steps` rounds that time one step of every layout in turn (interleaved, so
/// drift in the machine's speed hits all layouts alike). The first layout is the baseline.
pub fn parallel(
    model: &ModelConfig,
    batch: usize,
    layouts: &[Layout],
    warmup: usize,
    steps: usize,
    compute: &Compute,
    mut progress: impl FnMut(&str),
) -> Result<Vec<ParallelBench>> {
    let mut trainers = Vec::with_capacity(layouts.len());
    for (label, p) in layouts {
        let (_, mut t) = bench_trainer(model, batch, warmup + steps, p.clone(), compute)?;
        for _ in 0..warmup {
            t.step()?;
        }
        progress(&format!("{label} {} warmed up", p.describe()));
        trainers.push(t);
    }
    let n = layouts.len();
    let (mut wall, mut sim, mut comm) = (vec![Vec::new(); n], vec![Vec::new(); n], vec![Vec::new(); n]);
    let (mut compute, mut update) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    for round in 0..steps.max(1) {
        for (i, t) in trainers.iter_mut().enumerate() {
            let start = Instant::now();
            let s = t.step()?;
            wall[i].push(start.elapsed().as_secs_f64());
            sim[i].push(s.sim_s);
            comm[i].push(s.comm_s);
            compute[i].push(s.compute_s);
            update[i].push(s.update_s);
        }
        progress(&format!("round {}/{}", round + 1, steps.max(1)));
    }
    let base = median(wall[0].clone());
    let base_compute = median(compute[0].clone());
    let params = trainers[0].model().num_trainable();
    Ok(layouts
        .iter()
        .enumerate()
        .map(|(i, (label, p))| {
            let step = median(wall[i].clone());
            ParallelBench {
                model: model.label(),
                params,
                batch,
                layout: label.clone(),
                workers: p.workers,
                stages: p.stages,
                micro_batches: p.micro_batches,
                threads: 0,
                backend: String::new(),
                device: String::new(),
                steps: steps.max(1),
                step_ms_median: step * 1e3,
                ratio_vs_single: step / base,
                sim_step_ms_median: median(sim[i].clone()) * 1e3,
                comm_ms_median: median(comm[i].clone()) * 1e3,
                compute_ms_median: median(compute[i].clone()) * 1e3,
                update_ms_median: median(update[i].clone()) * 1e3,
                compute_ratio: median(compute[i].clone()) / base_compute,
            }
        })
        .collect())
}

/// Cost of the fault detectors: training steps with every detector on against the same steps
/// with none, measured in one process with the steps interleaved.
#[derive(Debug, Serialize)]
pub struct DetectBench {
    /// Model label.
    pub model: String,
    /// Data-parallel workers.
    pub workers: usize,
    /// Global batch size.
    pub batch: usize,
    /// Timed steps of each.
    pub steps: usize,
    /// Detectors that ran.
    pub detectors: String,
    /// Mean step time without detectors.
    pub step_ms_off: f64,
    /// Mean step time with every detector.
    pub step_ms_on: f64,
    /// `(on - off) / off`.
    pub overhead_share: f64,
}

/// Measures the detectors' cost on `model` with `workers` replicas at global batch `batch`.
/// Means, not medians, so that the every-10-steps divergence check is counted.
pub fn detection(model: &ModelConfig, batch: usize, workers: usize, warmup: usize, steps: usize, compute: &Compute) -> Result<DetectBench> {
    use resilab_faults::FaultInjector;
    use resilab_recovery::{DetectConfig, Guard, SpikeConfig, Strategy};
    let parallel = ParallelConfig { workers, ..ParallelConfig::default() };
    let (_, mut a) = bench_trainer(model, batch, warmup + steps, parallel.clone(), compute)?;
    let (_, mut b) = bench_trainer(model, batch, warmup + steps, parallel, compute)?;
    let none = DetectConfig {
        nan_loss: false,
        nan_gradients: false,
        nan_weights: false,
        loss_spike: None,
        divergence_every: None,
        ..DetectConfig::default()
    };
    let all = DetectConfig {
        nan_loss: true,
        nan_gradients: true,
        nan_weights: true,
        loss_spike: Some(SpikeConfig { window: 20, factor: 3.0 }),
        divergence_every: Some(10),
        ..DetectConfig::default()
    };
    let guard = |d| Guard::new(Strategy::None, d, workers);
    let (mut off, mut on) = (guard(none), guard(all));
    let mut faults = FaultInjector::new(Vec::new(), Vec::new(), 0);
    for _ in 0..warmup {
        a.step_with(&mut off.supervise(&mut faults))?;
        b.step_with(&mut on.supervise(&mut faults))?;
    }
    let (mut t_off, mut t_on) = (0.0, 0.0);
    for i in 0..steps.max(1) {
        // Alternate which goes first, so neither always runs on a warmer cache.
        let mut time = |t: &mut Trainer, g: &mut Guard| -> Result<f64> {
            let s = Instant::now();
            t.step_with(&mut g.supervise(&mut faults))?;
            Ok(s.elapsed().as_secs_f64())
        };
        if i % 2 == 0 {
            t_off += time(&mut a, &mut off)?;
            t_on += time(&mut b, &mut on)?;
        } else {
            t_on += time(&mut b, &mut on)?;
            t_off += time(&mut a, &mut off)?;
        }
    }
    let n = steps.max(1) as f64;
    Ok(DetectBench {
        model: model.label(),
        workers,
        batch,
        steps: steps.max(1),
        detectors: "nan_loss, nan_gradients, nan_weights, loss_spike(20, 3), divergence_every 10".into(),
        step_ms_off: t_off / n * 1e3,
        step_ms_on: t_on / n * 1e3,
        overhead_share: (t_on - t_off) / t_off,
    })
}

/// The step time of each training format against fp32's, measured in one process.
#[derive(Debug, Serialize)]
pub struct PrecisionBench {
    /// Model label.
    pub model: String,
    /// Batch size.
    pub batch: usize,
    /// Timed rounds (one step of each format each; medians are reported).
    pub steps: usize,
    /// Median fp32 step time in milliseconds.
    pub fp32_ms: f64,
    /// Median bf16 step time in milliseconds.
    pub bf16_ms: f64,
    /// Median fp16 step time in milliseconds (loss scaling included).
    pub fp16_ms: f64,
    /// `bf16_ms / fp32_ms`.
    pub bf16_vs_fp32: f64,
    /// `fp16_ms / fp32_ms`.
    pub fp16_vs_fp32: f64,
}

/// Step times of `model` in fp32, bf16 and fp16 (`train.precision`) at batch `batch`: after
/// `warmup` untimed steps of each, `steps` rounds of one step of each format, the order
/// rotating from round to round so that none always runs first; medians per format.
pub fn precision(model: &ModelConfig, batch: usize, warmup: usize, steps: usize, compute: &Compute) -> Result<PrecisionBench> {
    let total = warmup + steps.max(1);
    let mut trainers = Vec::new();
    for p in Precision::ALL {
        trainers.push(bench_trainer_in(model, batch, total, ParallelConfig::default(), compute, p)?.1);
    }
    for t in &mut trainers {
        for _ in 0..warmup {
            t.step()?;
        }
    }
    let mut times = vec![Vec::new(); trainers.len()];
    for round in 0..steps.max(1) {
        for k in 0..trainers.len() {
            let i = (round + k) % trainers.len();
            let t = Instant::now();
            trainers[i].step()?;
            times[i].push(t.elapsed().as_secs_f64());
        }
    }
    let ms: Vec<f64> = times.into_iter().map(|t| median(t) * 1e3).collect();
    Ok(PrecisionBench {
        model: model.label(),
        batch,
        steps: steps.max(1),
        fp32_ms: ms[0],
        bf16_ms: ms[1],
        fp16_ms: ms[2],
        bf16_vs_fp32: ms[1] / ms[0],
        fp16_vs_fp32: ms[2] / ms[0],
    })
}
