//! The toy that the crates' tests train: a small network on synthetic images, on flex with
//! autodiff, built from a few values each test may change. A test hands its parts to
//! `resilab_train::Trainer::new` with its own `TrainSpec` (this crate sits above the trainer in
//! the crate tour, so that the trainer's own tests can use it).

use std::sync::Arc;

use burn::prelude::*;
use resilab_data::{Split, synthetic::Synthetic};
use resilab_models::{Arch, InputShape, ModelConfig, Net, init_parameters};

/// ResNet-8 at quarter width: the toy's network.
pub const RESNET8: ModelConfig = ModelConfig { arch: Arch::Resnet, depth: Some(8), width: 0.25, batch_norm: None };

/// VGG-11 at an eighth of its width, without BatchNorm: a network whose replicas stay equal
/// without synchronised statistics.
pub const VGG11: ModelConfig = ModelConfig { arch: Arch::Vgg, depth: Some(11), width: 0.125, batch_norm: Some(false) };

/// Classes of the toy's images.
pub const CLASSES: usize = 4;

/// A toy setup: `model` on [`CLASSES`] classes of `size`x`size` RGB synthetic images
/// (difficulty 0.3) drawn from `data_seed`, `train_images` to train on and `test_images` to
/// test, its parameters initialised from `init_seed`. [`Toy::default`] is ResNet-8/4 on
/// 128 + 32 images of 16x16 from seed 3, initialised from seed 11.
#[derive(Clone, Debug)]
pub struct Toy {
    /// The network.
    pub model: ModelConfig,
    /// Image height and width.
    pub size: usize,
    /// Seed of the synthetic images.
    pub data_seed: u64,
    /// Training images.
    pub train_images: usize,
    /// Test images.
    pub test_images: usize,
    /// Seed of the parameters' initialisation.
    pub init_seed: u64,
}

impl Default for Toy {
    fn default() -> Self {
        Self { model: RESNET8, size: 16, data_seed: 3, train_images: 128, test_images: 32, init_seed: 11 }
    }
}

impl Toy {
    /// The images.
    ///
    /// # Panics
    /// If the generator refuses the sizes (a test's mistake).
    pub fn data(&self) -> Arc<Split> {
        let g = Synthetic { seed: self.data_seed, classes: CLASSES, channels: 3, size: self.size, difficulty: 0.3 };
        match (g.generate(0, self.train_images), g.generate(1, self.test_images)) {
            (Ok(train), Ok(test)) => Arc::new(Split::new(train, test)),
            (Err(e), _) | (_, Err(e)) => panic!("toy data: {e}"),
        }
    }

    /// The network, initialised, on `device`.
    ///
    /// # Panics
    /// If the model cannot be built (a test's mistake).
    pub fn net(&self, device: &Device) -> Net {
        match self.model.build(InputShape { channels: 3, size: self.size }, CLASSES, device) {
            Ok(net) => init_parameters(net, self.init_seed, device),
            Err(e) => panic!("toy model: {e}"),
        }
    }

    /// What `Trainer::new` takes besides the spec: the network, the images and the device
    /// (flex with autodiff).
    pub fn parts(&self) -> (Net, Arc<Split>, Device) {
        self.parts_on(self.data())
    }

    /// [`Toy::parts`] on `data` (images shared between trainers).
    pub fn parts_on(&self, data: Arc<Split>) -> (Net, Arc<Split>, Device) {
        let device = Device::flex().autodiff();
        (self.net(&device), data, device)
    }
}
