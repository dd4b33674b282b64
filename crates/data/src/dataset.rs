use burn::prelude::*;
use burn::tensor::{Int, TensorData};
use rand::Rng;

/// Padding of the random crop applied by [`Dataset::batch_augmented`].
pub const CROP_PADDING: i64 = 4;

/// An in-memory labelled image set, `u8` pixels in `[N, C, H, W]` order.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// Pixels, `len * channels * size * size` bytes.
    pub images: Vec<u8>,
    /// One label per image, in `0..classes`.
    pub labels: Vec<u8>,
    /// Channels per image.
    pub channels: usize,
    /// Height and width.
    pub size: usize,
    /// Number of classes.
    pub classes: usize,
}

impl Dataset {
    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no images.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Bytes per image.
    pub fn image_len(&self) -> usize {
        self.channels * self.size * self.size
    }

    /// Keeps the first `n` images (all if `n` is larger).
    pub fn truncate(&mut self, n: usize) {
        if n < self.len() {
            self.labels.truncate(n);
            self.images.truncate(n * self.image_len());
        }
    }

    /// Builds a normalised batch from the images at `indices` with the standard CIFAR
    /// augmentation: a random crop of the image padded by [`CROP_PADDING`] black pixels on each
    /// side, then a horizontal flip with probability 1/2. Draws come from `rng` in image order.
    ///
    /// # Shapes
    /// images `[B, C, H, W]` (f32), labels `[B]` (int)
    pub fn batch_augmented(
        &self,
        indices: &[usize],
        norm: &Normalization,
        rng: &mut impl Rng,
        device: &Device,
    ) -> (Tensor<4>, Tensor<1, Int>) {
        let (c, s) = (self.channels, self.size);
        let plane = s * s;
        let mut pixels = Vec::with_capacity(indices.len() * c * plane);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            let img = &self.images[i * c * plane..(i + 1) * c * plane];
            let dx = rng.random_range(-CROP_PADDING..=CROP_PADDING);
            let dy = rng.random_range(-CROP_PADDING..=CROP_PADDING);
            let flip = rng.random_bool(0.5);
            for ch in 0..c {
                let (m, inv) = (norm.mean[ch], 1.0 / norm.std[ch]);
                for y in 0..s as i64 {
                    for x in 0..s as i64 {
                        let sx = if flip { s as i64 - 1 - x } else { x } + dx;
                        let sy = y + dy;
                        let p = if (0..s as i64).contains(&sx) && (0..s as i64).contains(&sy) {
                            img[ch * plane + sy as usize * s + sx as usize]
                        } else {
                            0
                        };
                        pixels.push((f32::from(p) / 255.0 - m) * inv);
                    }
                }
            }
            labels.push(i64::from(self.labels[i]));
        }
        let b = indices.len();
        (Tensor::from_data(TensorData::new(pixels, [b, c, s, s]), device), Tensor::from_data(TensorData::new(labels, [b]), device))
    }

    /// Builds a normalised batch from the images at `indices`.
    ///
    /// # Shapes
    /// images `[B, C, H, W]` (f32), labels `[B]` (int)
    pub fn batch(&self, indices: &[usize], norm: &Normalization, device: &Device) -> (Tensor<4>, Tensor<1, Int>) {
        let (c, s) = (self.channels, self.size);
        let plane = s * s;
        let mut pixels = Vec::with_capacity(indices.len() * c * plane);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            let img = &self.images[i * c * plane..(i + 1) * c * plane];
            for ch in 0..c {
                let (m, inv) = (norm.mean[ch], 1.0 / norm.std[ch]);
                pixels.extend(img[ch * plane..(ch + 1) * plane].iter().map(|&p| (f32::from(p) / 255.0 - m) * inv));
            }
            labels.push(i64::from(self.labels[i]));
        }
        let b = indices.len();
        let x = Tensor::from_data(TensorData::new(pixels, [b, c, s, s]), device);
        let y = Tensor::from_data(TensorData::new(labels, [b]), device);
        (x, y)
    }
}

/// Per-channel mean and standard deviation of pixel values scaled to `[0, 1]`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Normalization {
    /// Mean per channel.
    pub mean: Vec<f32>,
    /// Standard deviation per channel.
    pub std: Vec<f32>,
}

impl Normalization {
    /// Checks a configured normalisation (`data.normalize`) for images of `channels`
    /// channels: one finite mean and one finite, positive standard deviation per channel.
    pub fn check(&self, channels: usize) -> crate::Result<()> {
        for (key, values) in [("mean", &self.mean), ("std", &self.std)] {
            if values.len() != channels {
                return Err(crate::Error::Config(format!(
                    "data.normalize.{key} holds {} value(s); the images have {channels} channel(s)",
                    values.len()
                )));
            }
        }
        if let Some(m) = self.mean.iter().find(|m| !m.is_finite()) {
            return Err(crate::Error::Config(format!("data.normalize.mean holds {m}: every mean must be finite")));
        }
        if let Some(s) = self.std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(crate::Error::Config(format!("data.normalize.std holds {s}: every standard deviation must be finite and above 0")));
        }
        Ok(())
    }

    /// Computes the statistics of `data` (in f64, so the result does not depend on order).
    pub fn of(data: &Dataset) -> Self {
        let (c, plane) = (data.channels, data.size * data.size);
        let mut sum = vec![0f64; c];
        let mut sq = vec![0f64; c];
        for img in data.images.chunks_exact(c * plane) {
            for ch in 0..c {
                for &p in &img[ch * plane..(ch + 1) * plane] {
                    let v = f64::from(p) / 255.0;
                    sum[ch] += v;
                    sq[ch] += v * v;
                }
            }
        }
        let n = (data.len() * plane).max(1) as f64;
        let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
        let std = sq.iter().zip(&mean).map(|(q, m)| ((q / n - m * m).max(0.0).sqrt()).max(1e-3) as f32).collect();
        Self { mean: mean.into_iter().map(|m| m as f32).collect(), std }
    }
}

/// Training and test sets with the normalisation of the training set.
#[derive(Clone, Debug)]
pub struct Split {
    /// Training images.
    pub train: Dataset,
    /// Test images.
    pub test: Dataset,
    /// Normalisation applied to both.
    pub norm: Normalization,
}

impl Split {
    /// Pairs the two sets and computes the normalisation from `train`.
    pub fn new(train: Dataset, test: Dataset) -> Self {
        let norm = Normalization::of(&train);
        Self { train, test, norm }
    }
}
