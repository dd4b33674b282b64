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
        self.assemble(indices, norm, device, || {
            let dx = rng.random_range(-CROP_PADDING..=CROP_PADDING);
            let dy = rng.random_range(-CROP_PADDING..=CROP_PADDING);
            View { dx, dy, flip: rng.random_bool(0.5) }
        })
    }

    /// Builds a normalised batch from the images at `indices`.
    ///
    /// # Shapes
    /// images `[B, C, H, W]` (f32), labels `[B]` (int)
    pub fn batch(&self, indices: &[usize], norm: &Normalization, device: &Device) -> (Tensor<4>, Tensor<1, Int>) {
        self.assemble(indices, norm, device, || View::IDENTITY)
    }

    /// The batch of `indices`' images, each seen through the view `view` gives for it (called
    /// once per image, in order), normalised channel by channel.
    fn assemble(
        &self,
        indices: &[usize],
        norm: &Normalization,
        device: &Device,
        mut view: impl FnMut() -> View,
    ) -> (Tensor<4>, Tensor<1, Int>) {
        let (c, s) = (self.channels, self.size);
        let plane = s * s;
        let mut pixels = Vec::with_capacity(indices.len() * c * plane);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            let img = &self.images[i * c * plane..(i + 1) * c * plane];
            let v = view();
            for ch in 0..c {
                let (m, inv) = (norm.mean[ch], 1.0 / norm.std[ch]);
                let normalised = |p: u8| (f32::from(p) / 255.0 - m) * inv;
                let channel = &img[ch * plane..(ch + 1) * plane];
                if v == View::IDENTITY {
                    pixels.extend(channel.iter().map(|&p| normalised(p)));
                } else {
                    pixels.extend((0..plane).map(|at| normalised(v.pixel(channel, s, at))));
                }
            }
            labels.push(i64::from(self.labels[i]));
        }
        let b = indices.len();
        (Tensor::from_data(TensorData::new(pixels, [b, c, s, s]), device), Tensor::from_data(TensorData::new(labels, [b]), device))
    }
}

/// How an image is seen in a batch: shifted by `(dx, dy)` pixels (black where the shift reads
/// outside it) after a horizontal flip when `flip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct View {
    dx: i64,
    dy: i64,
    flip: bool,
}

impl View {
    /// The image as it is.
    const IDENTITY: View = View { dx: 0, dy: 0, flip: false };

    /// The pixel this view shows at position `at` (row-major) of a `size` x `size` `channel`.
    fn pixel(self, channel: &[u8], size: usize, at: usize) -> u8 {
        let s = size as i64;
        let (y, x) = ((at / size) as i64, (at % size) as i64);
        let sx = if self.flip { s - 1 - x } else { x } + self.dx;
        let sy = y + self.dy;
        if (0..s).contains(&sx) && (0..s).contains(&sy) { channel[sy as usize * size + sx as usize] } else { 0 }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3x3 channel with pixel values 1..=9 in row order.
    const CHANNEL: [u8; 9] = [1, 2, 3, 4, 5, 6, 7, 8, 9];

    fn seen(v: View) -> Vec<u8> {
        (0..9).map(|at| v.pixel(&CHANNEL, 3, at)).collect()
    }

    #[test]
    fn a_view_flips_then_shifts_with_black_outside_the_image() {
        assert_eq!(seen(View::IDENTITY), CHANNEL);
        assert_eq!(seen(View { dx: 0, dy: 0, flip: true }), [3, 2, 1, 6, 5, 4, 9, 8, 7]);
        // Each output pixel reads one to the right and one below: the last column and row are black.
        assert_eq!(seen(View { dx: 1, dy: 1, flip: false }), [5, 6, 0, 8, 9, 0, 0, 0, 0]);
        assert_eq!(seen(View { dx: -1, dy: 0, flip: true }), [2, 1, 0, 5, 4, 0, 8, 7, 0]);
    }
}
