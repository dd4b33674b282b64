//! The complete training state as plain host values, by name: what a checkpoint stores, what a
//! rollback restores and what a replica is re-synchronised from.
//!
//! A [`TrainState`] holds, per worker, every parameter and buffer (by PyTorch-style name, with
//! its shape), the optimizer state (per-parameter step count and named buffers), the random
//! stream's position, the data cursor and, in an fp16 run, the loss scaler's state; and the global step, from which the learning-rate
//! schedule's position follows. Restoring it into a trainer built from the same configuration
//! continues training exactly as if it had never stopped.

use std::collections::BTreeMap;

use burn::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use resilab_models::{for_each_param, map_params};

use crate::{Cursor, Error, LossScaler, OptimState, ParamState, Result, ScalerState, Worker};

/// A tensor's values on the host, flattened, with its natural shape.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Natural shape.
    pub shape: Vec<usize>,
    /// Values in row-major order.
    pub values: Vec<f32>,
}

impl HostTensor {
    /// Copies a flattened tensor to the host.
    pub fn from_tensor(shape: Vec<usize>, t: Tensor<1>) -> Self {
        let values = t.into_data().convert::<f32>().try_into_vec::<f32>().expect("data converted to f32 just above");
        Self { shape, values }
    }

    /// Uploads the values as a flattened tensor.
    pub fn to_tensor(&self, device: &Device) -> Tensor<1> {
        Tensor::from_data(TensorData::new(self.values.clone(), [self.values.len()]), device)
    }
}

/// Optimizer state of one parameter on the host.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HostParamState {
    /// Updates applied so far.
    pub step: u64,
    /// Named buffers (`momentum_buffer`, `exp_avg`, `exp_avg_sq`), same shape as the parameter.
    pub buffers: BTreeMap<String, HostTensor>,
}

/// Position of a ChaCha8 random stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RngState {
    /// Key.
    pub seed: [u8; 32],
    /// Stream number.
    pub stream: u64,
    /// Position in the stream, in 32-bit words.
    pub word_pos: u128,
}

impl RngState {
    /// The position of `rng`.
    pub fn of(rng: &ChaCha8Rng) -> Self {
        Self { seed: rng.get_seed(), stream: rng.get_stream(), word_pos: rng.get_word_pos() }
    }

    /// A generator at this position.
    pub fn to_rng(self) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::from_seed(self.seed);
        rng.set_stream(self.stream);
        rng.set_word_pos(self.word_pos);
        rng
    }
}

/// Everything one worker owns.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerState {
    /// Rank.
    pub rank: usize,
    /// Parameters and buffers by name.
    pub params: BTreeMap<String, HostTensor>,
    /// Optimizer state by parameter name.
    pub optim: BTreeMap<String, HostParamState>,
    /// Random stream.
    pub rng: RngState,
    /// Data cursor.
    pub cursor: Cursor,
    /// The loss scaler's state, in an fp16 run.
    pub scaler: Option<ScalerState>,
}

/// The whole training state.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainState {
    /// Steps completed (the learning-rate schedule's position).
    pub step: u64,
    /// One entry per worker, in rank order.
    pub workers: Vec<WorkerState>,
}

impl WorkerState {
    /// Copies a worker's state to the host.
    pub fn capture(w: &Worker) -> Self {
        let mut params = BTreeMap::new();
        for_each_param(&w.net, |info, t| {
            params.insert(info.name.clone(), HostTensor::from_tensor(info.shape.clone(), t));
        });
        let optim = w
            .optim
            .params
            .iter()
            .map(|(name, st)| {
                let shape = params.get(name).map(|p: &HostTensor| p.shape.clone()).unwrap_or_default();
                let buffers = st.buffers.iter().map(|(b, t)| (b.clone(), HostTensor::from_tensor(shape.clone(), t.clone()))).collect();
                (name.clone(), HostParamState { step: st.step, buffers })
            })
            .collect();
        Self { rank: w.rank, params, optim, rng: RngState::of(&w.rng), cursor: w.cursor, scaler: w.scaler.as_ref().map(|s| s.state) }
    }

    /// Checks that this state fits `w`'s model: the same parameter names, each with the same
    /// shape and value count, and optimizer buffers only for known parameters and of their size.
    /// The error lists what does not fit.
    pub fn check_fits(&self, w: &Worker) -> Result<()> {
        let mut problems = Vec::new();
        let mut expected = BTreeMap::new();
        for info in resilab_models::named_params(&w.net) {
            expected.insert(info.name.clone(), info.shape.clone());
        }
        for (name, shape) in &expected {
            match self.params.get(name) {
                None => problems.push(format!("missing {name}")),
                Some(t) if &t.shape != shape || t.values.len() != shape.iter().product::<usize>() => {
                    problems.push(format!("{name}: shape {:?} with {} values, model expects {shape:?}", t.shape, t.values.len()))
                }
                Some(_) => {}
            }
        }
        for name in self.params.keys().filter(|n| !expected.contains_key(*n)) {
            problems.push(format!("unexpected {name}"));
        }
        for (name, st) in &self.optim {
            let Some(shape) = expected.get(name) else {
                problems.push(format!("optimizer state for unknown parameter {name}"));
                continue;
            };
            let n: usize = shape.iter().product();
            for (b, t) in &st.buffers {
                if t.values.len() != n {
                    problems.push(format!("{name}/{b}: {} values, parameter has {n}", t.values.len()));
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::State(format!("state does not fit worker {}'s model: {}", w.rank, problems.join("; "))))
        }
    }

    /// Replaces `w`'s model values, optimizer state, random stream and cursor with this state.
    pub fn restore_into(&self, w: &mut Worker, device: &Device) -> Result<()> {
        self.check_fits(w)?;
        let net = w.net.clone();
        w.net = map_params(net, |info, _| self.params.get(&info.name).map(|t| t.to_tensor(device)));
        w.optim = OptimState {
            params: self
                .optim
                .iter()
                .map(|(name, st)| {
                    let buffers = st.buffers.iter().map(|(b, t)| (b.clone(), t.to_tensor(device))).collect();
                    (name.clone(), ParamState { step: st.step, buffers })
                })
                .collect(),
        };
        w.rng = self.rng.to_rng();
        w.cursor = self.cursor;
        // A worker without a scaler (not fp16) keeps none; one restored from a state without
        // one (saved by a run in another format) starts at the configured scale.
        if let Some(sc) = w.scaler.as_mut() {
            sc.state = self.scaler.unwrap_or_else(|| LossScaler::new(&sc.config).state);
        }
        Ok(())
    }
}
