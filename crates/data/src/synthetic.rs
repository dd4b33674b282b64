//! A built-in image classification set that needs no files.
//!
//! Each class has a prototype made of three oriented sinusoidal gratings, each with its own
//! colour; an image of that class is its prototype shifted by a random offset, with random
//! contrast, blended with another class's prototype and covered in noise. `difficulty` in
//! `[0, 1]` scales the blend and the noise: at 0 the classes are easy to separate, at 1 the
//! images are mostly noise. Every image is a pure function of `(seed, split, index)`.

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Dataset, Error, Result};

/// Parameters of the generator.
#[derive(Clone, Debug, PartialEq)]
pub struct Synthetic {
    /// Seed of the prototypes and the images.
    pub seed: u64,
    /// Number of classes.
    pub classes: usize,
    /// Channels (1 or 3).
    pub channels: usize,
    /// Height and width.
    pub size: usize,
    /// Difficulty in `[0, 1]`.
    pub difficulty: f64,
}

struct Grating {
    fx: f32,
    fy: f32,
    phase: f32,
    color: [f32; 3],
}

const GRATINGS: usize = 3;

fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut z = seed ^ a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn unit(rng: &mut ChaCha8Rng) -> f32 {
    (rng.next_u32() >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
}

impl Synthetic {
    /// Checks the parameters; errors name the `data.*` key.
    pub(crate) fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.difficulty) {
            return Err(Error::Config(format!("data.difficulty = {} must be in [0, 1]", self.difficulty)));
        }
        if !(2..=256).contains(&self.classes) {
            return Err(Error::Config(format!("data.classes = {} must be in 2..=256", self.classes)));
        }
        if !matches!(self.channels, 1 | 3) {
            return Err(Error::Config(format!("data.channels = {} (allowed: 1, 3)", self.channels)));
        }
        if !(8..=64).contains(&self.size) {
            return Err(Error::Config(format!("data.image_size = {} must be in 8..=64", self.size)));
        }
        Ok(())
    }

    /// Bytes that `len` images (and their labels) take, `None` if that overflows a `u64`.
    pub(crate) fn bytes(&self, len: usize) -> Option<u64> {
        let per_image = crate::limits::checked_product(&[self.channels as u64, self.size as u64, self.size as u64])?.checked_add(1)?;
        per_image.checked_mul(len as u64)
    }

    /// Checks that `len` images of split `split` fit in the memory budget; the
    /// error names `data.train_size` (split 0) or `data.test_size`.
    pub(crate) fn check_memory(&self, split: u64, len: usize) -> Result<()> {
        let key = if split == 0 { "data.train_size" } else { "data.test_size" };
        Ok(crate::limits::check_memory(key, &len, self.bytes(len), "its images")?)
    }

    fn prototypes(&self) -> Vec<Vec<Grating>> {
        (0..self.classes)
            .map(|c| {
                let mut rng = ChaCha8Rng::seed_from_u64(mix(self.seed, 0x5052_4f54, c as u64));
                (0..GRATINGS)
                    .map(|_| {
                        let angle = unit(&mut rng) * std::f32::consts::PI;
                        // 1.5 to 5 cycles across the image.
                        let freq = (1.5 + 3.5 * unit(&mut rng)) * std::f32::consts::TAU / self.size as f32;
                        Grating {
                            fx: freq * angle.cos(),
                            fy: freq * angle.sin(),
                            phase: unit(&mut rng) * std::f32::consts::TAU,
                            color: [unit(&mut rng) * 2.0 - 1.0, unit(&mut rng) * 2.0 - 1.0, unit(&mut rng) * 2.0 - 1.0],
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// Generates `len` images of split `split` (0 = train, 1 = test). Labels cycle through the
    /// classes, so every class has `len / classes` images (±1).
    pub fn generate(&self, split: u64, len: usize) -> Result<Dataset> {
        self.validate()?;
        self.check_memory(split, len)?;
        let protos = self.prototypes();
        let (c, s) = (self.channels, self.size);
        let plane = s * s;
        let mut images = vec![0u8; len * c * plane];
        let mut labels = Vec::with_capacity(len);
        let blend = 0.6 * self.difficulty as f32;
        let noise = 0.15 + 0.85 * self.difficulty as f32;
        let mut value = vec![0f32; c * plane];
        for (i, img) in images.chunks_exact_mut(c * plane).enumerate() {
            let mut rng = ChaCha8Rng::seed_from_u64(mix(self.seed, split + 1, i as u64));
            let label = i % self.classes;
            let other = (label + 1 + rng.random_range(0..self.classes - 1)) % self.classes;
            let (dx, dy) = (rng.random_range(-4.0f32..=4.0), rng.random_range(-4.0f32..=4.0));
            let contrast = 0.6 + 0.4 * unit(&mut rng);
            value.iter_mut().for_each(|v| *v = 0.0);
            for (proto, weight) in [(&protos[label], contrast * (1.0 - blend)), (&protos[other], contrast * blend)] {
                for g in proto {
                    for y in 0..s {
                        for x in 0..s {
                            let t = ((x as f32 + dx) * g.fx + (y as f32 + dy) * g.fy + g.phase).sin() * weight;
                            for ch in 0..c {
                                let col = if c == 1 { 1.0 } else { g.color[ch] };
                                value[ch * plane + y * s + x] += t * col;
                            }
                        }
                    }
                }
            }
            for (dst, v) in img.iter_mut().zip(&value) {
                // Uniform noise in ±noise, then map [-1.5, 1.5] to [0, 255].
                let n = (unit(&mut rng) * 2.0 - 1.0) * noise;
                let p = (v / GRATINGS as f32 + n) / 3.0 + 0.5;
                *dst = (p.clamp(0.0, 1.0) * 255.0).round() as u8;
            }
            labels.push(label as u8);
        }
        Ok(Dataset { images, labels, channels: c, size: s, classes: self.classes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generate_set(seed: u64, difficulty: f64) -> Dataset {
        Synthetic { seed, classes: 10, channels: 3, size: 32, difficulty }.generate(0, 50).unwrap()
    }

    #[test]
    fn deterministic_and_seed_dependent() {
        assert_eq!(generate_set(1, 0.3).images, generate_set(1, 0.3).images);
        assert_ne!(generate_set(1, 0.3).images, generate_set(2, 0.3).images);
    }

    #[test]
    fn balanced_labels_and_full_range() {
        let d = generate_set(0, 0.3);
        assert_eq!(d.len(), 50);
        for c in 0..10u8 {
            assert_eq!(d.labels.iter().filter(|&&l| l == c).count(), 5);
        }
        let (lo, hi) = (d.images.iter().min().unwrap(), d.images.iter().max().unwrap());
        assert!(*lo < 70 && *hi > 185, "pixel range {lo}..{hi}");
    }

    #[test]
    fn same_class_images_are_closer_than_other_class_images() {
        // Nearest-class-mean classification on raw pixels beats chance by far at low difficulty:
        // a sanity check that the classes carry signal.
        let train = Synthetic { seed: 3, classes: 10, channels: 3, size: 16, difficulty: 0.0 }.generate(0, 400).unwrap();
        let n = train.image_len();
        let mut means = vec![vec![0f32; n]; 10];
        for (img, &l) in train.images.chunks_exact(n).zip(&train.labels) {
            for (m, &p) in means[l as usize].iter_mut().zip(img) {
                *m += f32::from(p) / 40.0;
            }
        }
        let test = Synthetic { seed: 3, classes: 10, channels: 3, size: 16, difficulty: 0.0 }.generate(1, 200).unwrap();
        let correct = test
            .images
            .chunks_exact(n)
            .zip(&test.labels)
            .filter(|(img, l)| {
                let d = |m: &Vec<f32>| m.iter().zip(img.iter()).map(|(a, &b)| (a - f32::from(b)).powi(2)).sum::<f32>();
                let best = (0..10).min_by(|&a, &b| d(&means[a]).total_cmp(&d(&means[b]))).unwrap();
                best == **l as usize
            })
            .count();
        assert!(correct > 40, "nearest mean got {correct}/200");
    }

    #[test]
    fn refuses_more_images_than_memory_holds() {
        // Before the check this aborted on a failed multi-terabyte allocation.
        let g = Synthetic { seed: 0, classes: 10, channels: 3, size: 32, difficulty: 0.5 };
        let e = g.generate(0, 1_000_000_000_000).unwrap_err().to_string();
        assert!(e.starts_with("data.train_size = 1000000000000 needs 3073000000000000 bytes"), "{e}");
        let e = g.generate(1, usize::MAX).unwrap_err().to_string();
        assert!(e.contains("data.test_size") && e.contains("more than 2^64 bytes"), "{e}");
    }

    #[test]
    fn rejects_bad_difficulty() {
        let e = Synthetic { seed: 0, classes: 10, channels: 3, size: 32, difficulty: 1.5 }.generate(0, 1);
        assert!(e.unwrap_err().to_string().contains("data.difficulty"));
    }
}
