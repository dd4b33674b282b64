use burn::nn::loss::CrossEntropyLossConfig;
use burn::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use resilab_data::{Dataset, Normalization};
use resilab_models::{Net, stream_seed};

use crate::{Grads, LossScaler, OptimState};

/// Position in the training data: the epoch and the next image of its shuffled order.
///
/// Counted in images rather than batches, so that a data-parallel job that shrinks its global
/// batch mid-epoch (workers lost for good, per-worker batch kept) goes on where it stopped and
/// sees every image of the epoch once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cursor {
    /// Epoch (0-based).
    pub epoch: usize,
    /// Images of the epoch's order already read (0-based position of the next one).
    pub sample: usize,
}

impl Cursor {
    /// The position after a batch of `taken` images, in epochs of `len` images whose next
    /// batch has `next` images: a new epoch starts when the next batch would not fit (a last
    /// partial batch is dropped, as with PyTorch's `drop_last=True`).
    pub fn advance(self, taken: usize, next: usize, len: usize) -> Self {
        let sample = self.sample + taken;
        if sample + next > len { Self { epoch: self.epoch + 1, sample: 0 } } else { Self { epoch: self.epoch, sample } }
    }
}

/// One simulated training process: its own model replica, optimizer state, random stream and
/// data cursor. A single-process run is the one-worker case.
#[derive(Clone, Debug)]
pub struct Worker {
    /// Rank among the workers.
    pub rank: usize,
    /// The model replica.
    pub net: Net,
    /// Optimizer state by parameter name.
    pub optim: OptimState,
    /// Random stream for data augmentation.
    pub rng: ChaCha8Rng,
    /// Next batch to read.
    pub cursor: Cursor,
    /// The loss scaler, when the network computes in fp16 (`train.precision`).
    pub scaler: Option<LossScaler>,
}

/// What one forward/backward pass on a worker's shard produced.
#[derive(Debug)]
pub struct LocalPass {
    /// Mean cross-entropy loss over the shard.
    pub loss: f64,
    /// Correct top-1 predictions in the shard.
    pub correct: usize,
    /// Images in the shard.
    pub count: usize,
    /// Gradients by parameter name.
    pub grads: Grads,
}

impl Worker {
    /// Bytes of the worker's model (parameters and buffers) and optimizer state: what a
    /// replica sends to respawn it, or a rollback copies.
    pub fn state_bytes(&self) -> u64 {
        let mut n = 0usize;
        resilab_models::for_each_param(&self.net, |_, t| n += t.dims()[0]);
        n += self.optim.params.values().flat_map(|p| p.buffers.values()).map(|t| t.dims()[0]).sum::<usize>();
        4 * n as u64
    }

    /// A worker of rank `rank` whose random stream derives from `seed`.
    pub fn new(rank: usize, net: Net, seed: u64) -> Self {
        Self {
            rank,
            net,
            optim: OptimState::default(),
            rng: ChaCha8Rng::seed_from_u64(stream_seed(seed, &format!("worker.{rank}.rng"))),
            cursor: Cursor::default(),
            scaler: None,
        }
    }

    /// The factor the loss is multiplied by before the backward pass (1 without a scaler).
    pub fn loss_scale(&self) -> Option<f32> {
        self.scaler.as_ref().map(|s| s.state.scale)
    }

    /// With a loss scaler, `grads` unscaled ([`crate::unscale`]) and whether they overflowed,
    /// after which the scaler updates its scale; without one, `grads` as they are.
    pub fn unscale(&mut self, grads: Grads) -> (Grads, bool) {
        let Some(s) = self.scaler.as_mut() else { return (grads, false) };
        let (out, found_inf) = crate::unscale(&grads, s.state.scale);
        s.update(found_inf);
        (out, found_inf)
    }
}

/// Number of rows of `logits` whose arg-max equals the label.
pub fn count_correct(logits: Tensor<2>, labels: Tensor<1, Int>) -> usize {
    let pred = logits.argmax(1).flatten::<1>(0, 1);
    pred.equal(labels).int().sum().into_scalar::<i64>() as usize
}

/// Test loss and accuracy.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Evaluation {
    /// Mean cross-entropy.
    pub loss: f64,
    /// Top-1 accuracy in `[0, 1]`.
    pub accuracy: f64,
}

/// Evaluates `net` in inference mode on the whole of `data`, `batch` images at a time.
pub fn evaluate(net: &Net, data: &Dataset, norm: &Normalization, batch: usize, device: &Device) -> Evaluation {
    let net = net.valid();
    let inner = device.clone().without_autodiff();
    let ce = CrossEntropyLossConfig::new().init(&inner);
    let (mut loss_sum, mut correct) = (0.0f64, 0usize);
    let all: Vec<usize> = (0..data.len()).collect();
    for chunk in all.chunks(batch.max(1)) {
        let (x, y) = data.batch(chunk, norm, &inner);
        let logits = net.infer(x);
        correct += count_correct(logits.clone(), y.clone());
        loss_sum += f64::from(ce.forward(logits, y).into_scalar::<f32>()) * chunk.len() as f64;
    }
    let n = data.len().max(1) as f64;
    Evaluation { loss: loss_sum / n, accuracy: correct as f64 / n }
}

/// One test image's prediction: its label, the predicted class and every logit.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// The label.
    pub label: usize,
    /// The arg-max of the logits (the first of equal ones).
    pub predicted: usize,
    /// The logits, one per class.
    pub logits: Vec<f32>,
}

/// Each image of `data`, in order, through `net` in inference mode, `batch` at a time: what
/// [`evaluate`] counts, image by image.
pub fn predict(net: &Net, data: &Dataset, norm: &Normalization, batch: usize, device: &Device) -> crate::Result<Vec<Prediction>> {
    let net = net.valid();
    let inner = device.clone().without_autodiff();
    let all: Vec<usize> = (0..data.len()).collect();
    let mut out = Vec::with_capacity(data.len());
    for chunk in all.chunks(batch.max(1)) {
        let (x, _) = data.batch(chunk, norm, &inner);
        let logits = net.infer(x);
        let classes = logits.dims()[1];
        let values = logits.into_data().convert::<f32>().try_to_vec::<f32>().map_err(|e| crate::Error::State(format!("logits: {e:?}")))?;
        for (row, &i) in values.chunks_exact(classes.max(1)).zip(chunk) {
            let predicted = row.iter().enumerate().fold(0, |best, (k, v)| if *v > row[best] { k } else { best });
            out.push(Prediction { label: usize::from(data.labels[i]), predicted, logits: row.to_vec() });
        }
    }
    Ok(out)
}
