use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::synthetic::Synthetic;
use crate::{Error, Result, Split, cifar, mnist};

/// Where the images come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataSource {
    /// The built-in generator ([`crate::synthetic`]).
    Synthetic,
    /// CIFAR-10 binary batches in `path`.
    Cifar10,
    /// MNIST IDX files in `path`.
    Mnist,
    /// Fashion-MNIST IDX files in `path` (same format as MNIST).
    FashionMnist,
}

fn default_train_size() -> usize {
    5000
}
fn default_test_size() -> usize {
    1000
}
fn default_difficulty() -> f64 {
    0.7
}
fn default_classes() -> usize {
    10
}
fn default_channels() -> usize {
    3
}
fn default_image_size() -> usize {
    32
}

/// The `[data]` section of a run configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// `synthetic` (default), `cifar10`, `mnist` or `fashion-mnist`.
    #[serde(default = "default_source")]
    pub source: DataSource,
    /// Directory with the dataset files (real datasets only).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Synthetic: images generated for training. Real data: at most this many are used
    /// (the first ones in file order); omit to use the whole set.
    #[serde(default)]
    pub train_size: Option<usize>,
    /// Same as `train_size`, for the test split.
    #[serde(default)]
    pub test_size: Option<usize>,
    /// Synthetic only: difficulty in `[0, 1]`.
    #[serde(default = "default_difficulty")]
    pub difficulty: f64,
    /// Synthetic only: number of classes.
    #[serde(default = "default_classes")]
    pub classes: usize,
    /// Synthetic only: channels (1 or 3).
    #[serde(default = "default_channels")]
    pub channels: usize,
    /// Synthetic only: image height and width.
    #[serde(default = "default_image_size")]
    pub image_size: usize,
    /// Seed of the synthetic images (independent of the training seed, so repetitions with
    /// different training seeds see the same data).
    #[serde(default)]
    pub seed: u64,
}

fn default_source() -> DataSource {
    DataSource::Synthetic
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            source: DataSource::Synthetic,
            path: None,
            train_size: None,
            test_size: None,
            difficulty: default_difficulty(),
            classes: default_classes(),
            channels: default_channels(),
            image_size: default_image_size(),
            seed: 0,
        }
    }
}

impl DataConfig {
    /// `(channels, image size, classes)` of the images this configuration gives, known without
    /// reading or generating them (so a grid of configurations can be checked up front).
    pub fn shape(&self) -> (usize, usize, usize) {
        match self.source {
            DataSource::Synthetic => (self.channels, self.image_size, self.classes),
            DataSource::Cifar10 => (3, 32, 10),
            DataSource::Mnist | DataSource::FashionMnist => (1, 28, 10),
        }
    }
}

/// Loads (or generates) the training and test sets described by `cfg`.
pub fn load(cfg: &DataConfig) -> Result<Split> {
    let (mut train, mut test) = match cfg.source {
        DataSource::Synthetic => {
            let g = Synthetic {
                seed: cfg.seed,
                classes: cfg.classes,
                channels: cfg.channels,
                size: cfg.image_size,
                difficulty: cfg.difficulty,
            };
            let train = g.generate(0, cfg.train_size.unwrap_or(default_train_size()))?;
            let test = g.generate(1, cfg.test_size.unwrap_or(default_test_size()))?;
            (train, test)
        }
        source => {
            let path = cfg.path.as_ref().ok_or_else(|| {
                Error::Config(format!(
                    "data.path is required for data.source = \"{}\" (see datasets/README.md)",
                    source_name(source)
                ))
            })?;
            if !path.is_dir() {
                return Err(Error::Config(format!(
                    "data.path = {} is not a directory (see datasets/README.md for where to place {})",
                    path.display(),
                    source_name(source)
                )));
            }
            match source {
                DataSource::Cifar10 => cifar::load(path)?,
                _ => mnist::load(path)?,
            }
        }
    };
    if cfg.source != DataSource::Synthetic {
        train.truncate(cfg.train_size.unwrap_or(usize::MAX));
        test.truncate(cfg.test_size.unwrap_or(usize::MAX));
    }
    if train.is_empty() || test.is_empty() {
        return Err(Error::Config("data.train_size and data.test_size must be at least 1".into()));
    }
    Ok(Split::new(train, test))
}

/// The configuration spelling of a source.
pub fn source_name(s: DataSource) -> &'static str {
    match s {
        DataSource::Synthetic => "synthetic",
        DataSource::Cifar10 => "cifar10",
        DataSource::Mnist => "mnist",
        DataSource::FashionMnist => "fashion-mnist",
    }
}
