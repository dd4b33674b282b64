use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::synthetic::Synthetic;
use crate::{Error, Result, Split, cifar, mnist};

/// Where the images come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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

/// Synthetic images generated for training when `data.train_size` is not given.
pub const DEFAULT_TRAIN_SIZE: usize = 5000;
/// Synthetic images generated for testing when `data.test_size` is not given.
pub const DEFAULT_TEST_SIZE: usize = 1000;

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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Input normalisation per channel, on pixels scaled to `[0, 1]`, as torchvision's
    /// `Normalize(mean, std)` takes it: set it to the normalisation a model was trained with
    /// (an imported PyTorch model), or to `"dataset"` for the training set's statistics chosen
    /// knowingly. Omitted, it is computed from the training set (refused by `resilab import`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<RawNormalize>")]
    pub normalize: Option<NormalizeSpec>,
}

/// `data.normalize`: the statistics given, or the training set's.
#[derive(Clone, Debug, PartialEq)]
pub enum NormalizeSpec {
    /// `{ mean = [...], std = [...] }`.
    Given(crate::Normalization),
    /// `"dataset"`: computed from the training set.
    Dataset,
}

/// How `data.normalize` is written (its schema).
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // read by the schema only
enum RawNormalize {
    /// `"dataset"`.
    Name(String),
    /// `{ mean = [...], std = [...] }`.
    Table(crate::Normalization),
}

impl Serialize for NormalizeSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Given(n) => n.serialize(s),
            Self::Dataset => s.serialize_str("dataset"),
        }
    }
}

impl<'de> Deserialize<'de> for NormalizeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Spec;
        impl<'de> serde::de::Visitor<'de> for Spec {
            type Value = NormalizeSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"dataset\" or { mean = [...], std = [...] } (one value per channel)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<NormalizeSpec, E> {
                match v {
                    "dataset" => Ok(NormalizeSpec::Dataset),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, map: M) -> std::result::Result<NormalizeSpec, M::Error> {
                crate::Normalization::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(NormalizeSpec::Given)
            }
        }
        d.deserialize_any(Spec)
    }
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
            normalize: None,
        }
    }
}

impl DataConfig {
    /// Checks every value before anything is read or generated: sizes of at least 1, the
    /// synthetic generator's ranges, and, for synthetic data, that the images fit in the
    /// memory budget ([`crate::limits::check_memory`]). Errors name the key.
    pub fn validate(&self) -> Result<()> {
        for (key, size) in [("data.train_size", self.train_size), ("data.test_size", self.test_size)] {
            if size == Some(0) {
                return Err(Error::Config(format!("{key} = 0 must be at least 1")));
            }
        }
        if let Some(NormalizeSpec::Given(norm)) = &self.normalize {
            norm.check(self.shape().0)?;
        }
        if self.source != DataSource::Synthetic {
            // Real data: the sizes only limit what the files hold; nothing is sized by them.
            return Ok(());
        }
        let g = self.generator();
        g.validate()?;
        let (train, test) = self.sizes();
        g.check_memory(0, train)?;
        g.check_memory(1, test)?;
        let both = g.bytes(train).zip(g.bytes(test)).and_then(|(a, b)| a.checked_add(b));
        Ok(crate::limits::check_memory("data.train_size + data.test_size", &format!("{train} + {test}"), both, "their images")?)
    }

    /// The synthetic generator this configuration describes.
    fn generator(&self) -> Synthetic {
        Synthetic { seed: self.seed, classes: self.classes, channels: self.channels, size: self.image_size, difficulty: self.difficulty }
    }

    /// Synthetic: the images generated for training and test (the defaults where not given).
    fn sizes(&self) -> (usize, usize) {
        (self.train_size.unwrap_or(DEFAULT_TRAIN_SIZE), self.test_size.unwrap_or(DEFAULT_TEST_SIZE))
    }

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
    cfg.validate()?;
    let (mut train, mut test) = match cfg.source {
        DataSource::Synthetic => {
            let g = cfg.generator();
            let (train_len, test_len) = cfg.sizes();
            (g.generate(0, train_len)?, g.generate(1, test_len)?)
        }
        source => {
            let path = cfg.path.as_ref().ok_or_else(|| {
                Error::Config(format!("data.path is required for data.source = \"{}\" (see datasets/README.md)", source_name(source)))
            })?;
            if !path.is_dir() {
                return Err(Error::Config(format!(
                    "data.path = {} is not a directory (see datasets/README.md for where to place {})",
                    path.display(),
                    source_name(source)
                )));
            }
            match source {
                DataSource::Cifar10 => cifar::load(path, cfg.train_size)?,
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
    match &cfg.normalize {
        // A configured normalisation: the training set's statistics are not computed at all.
        Some(NormalizeSpec::Given(norm)) => Ok(Split { train, test, norm: norm.clone() }),
        Some(NormalizeSpec::Dataset) | None => Ok(Split::new(train, test)),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn err(cfg: DataConfig) -> String {
        cfg.validate().unwrap_err().to_string()
    }

    #[test]
    fn sizes_are_checked_before_anything_is_generated() {
        let ok = DataConfig::default();
        ok.validate().unwrap();
        let e = err(DataConfig { train_size: Some(1_000_000_000_000), ..ok.clone() });
        assert!(e.starts_with("data.train_size = 1000000000000 needs 3073000000000000 bytes"), "{e}");
        assert!(e.contains("more than the budget of"), "{e}");
        let e = err(DataConfig { test_size: Some(usize::MAX), ..ok.clone() });
        assert!(e.starts_with("data.test_size = 18446744073709551615 needs more than 2^64 bytes"), "{e}");
        assert!(err(DataConfig { train_size: Some(0), ..ok.clone() }).contains("data.train_size = 0"));
        assert!(err(DataConfig { image_size: 100_000, ..ok.clone() }).contains("data.image_size = 100000"));
        assert!(err(DataConfig { channels: 1 << 40, ..ok.clone() }).contains("data.channels"));
        assert!(err(DataConfig { classes: 1 << 40, ..ok.clone() }).contains("data.classes"));
        // load() checks first, so a huge size is an error, not an aborted allocation.
        let e = load(&DataConfig { train_size: Some(1_000_000_000_000), ..ok.clone() }).unwrap_err().to_string();
        assert!(e.contains("data.train_size"), "{e}");
        // Real data: the sizes are limits, not allocations.
        DataConfig { source: DataSource::Cifar10, train_size: Some(usize::MAX), ..ok }.validate().unwrap();
    }

    #[test]
    fn a_size_over_the_budget_is_a_budget_error_naming_its_key() {
        let e = DataConfig { train_size: Some(1_000_000_000_000), ..DataConfig::default() }.validate().unwrap_err();
        assert!(matches!(&e, Error::Budget(crate::limits::Error::Budget(r)) if r.key == "data.train_size" && r.bytes.is_some()), "{e:?}");
    }

    #[test]
    fn a_configured_normalisation_replaces_the_training_sets() {
        let small = DataConfig { train_size: Some(20), test_size: Some(4), ..DataConfig::default() };
        let computed = load(&small).unwrap().norm;
        let given = crate::Normalization { mean: vec![0.4914, 0.4822, 0.4465], std: vec![0.247, 0.243, 0.261] };
        let split = load(&DataConfig { normalize: Some(NormalizeSpec::Given(given.clone())), ..small.clone() }).unwrap();
        assert_eq!(split.norm, given);
        assert_ne!(computed, given);
        let two = crate::Normalization { mean: vec![0.5, 0.5], std: vec![0.2, 0.2] };
        let e = err(DataConfig { normalize: Some(NormalizeSpec::Given(two)), ..small.clone() });
        assert_eq!(e, "data.normalize.mean holds 2 value(s); the images have 3 channel(s)");
        let zero = crate::Normalization { mean: vec![0.5; 3], std: vec![0.2, 0.0, 0.2] };
        assert!(err(DataConfig { normalize: Some(NormalizeSpec::Given(zero)), ..small }).starts_with("data.normalize.std holds 0"));
    }
}
