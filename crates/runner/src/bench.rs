//! Throughput measurement of full training steps (forward, backward, optimizer), on random
//! synthetic images, through the same [`Trainer`](resilab_train::Trainer) the runs use.

use std::sync::Arc;
use std::time::Instant;

use burn::prelude::*;
use resilab_data::{DataConfig, Split};
use resilab_models::ModelConfig;
use serde::Serialize;

use crate::{Result, RunConfig};

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
}

/// Measures `steps` training steps (after `warmup` untimed ones) of `model` at batch `batch` on
/// 3x32x32 images, SGD with momentum 0.9.
pub fn train_step(model: &ModelConfig, batch: usize, warmup: usize, steps: usize, device: &Device) -> Result<(f64, usize)> {
    let data = DataConfig { train_size: Some(batch), test_size: Some(1), ..DataConfig::default() };
    let split: Arc<Split> = Arc::new(resilab_data::load(&data)?);
    let mut cfg = RunConfig::from_toml("[model]\narch = \"resnet\"\ndepth = 8\n", &[], "bench")?;
    cfg.model = model.clone();
    cfg.data = data;
    cfg.train.batch_size = batch;
    cfg.train.steps = Some((warmup + steps) as u64);
    let mut trainer = crate::run::build_trainer(&cfg, split, device)?;
    let params = trainer.workers[0].net.num_trainable();
    for _ in 0..warmup {
        trainer.step();
    }
    let mut times: Vec<f64> = (0..steps.max(1))
        .map(|_| {
            let t = Instant::now();
            trainer.step();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], params))
}
