//! `resilab import --probe`: the imported model's logits against the ones PyTorch computed.
//!
//! A probe (written by `docs/pytorch/resilab_probe.py`) is a safetensors file holding a batch of
//! images before normalisation (`images`, `[N, C, H, W]`, pixels in `[0, 1]`), the logits the
//! PyTorch module gave for them in eval mode after its normalisation (`logits`, `[N, classes]`),
//! and that normalisation (metadata `mean` and `std`). The import normalises the images with the
//! configuration's `data.normalize` and runs resilab's forward pass: a forward pass that differs
//! (a stride in another place, a max-pool, another stem) or a normalisation that differs shows
//! as logits that differ.

use std::path::Path;

use burn::prelude::*;
use resilab_data::Normalization;
use resilab_models::Net;
use safetensors::{Dtype, SafeTensors};
use serde::Serialize;

use crate::{Error, Result};

/// Largest difference allowed, relative to the probe's largest logit. The same model computes
/// PyTorch's logits within 4e-8 of the largest on both kernel paths (`tests/pytorch.rs`);
/// float32 summation order alone stays far below this bound, a different forward pass far above.
pub const TOLERANCE: f32 = 1e-4;

/// What a probe showed.
#[derive(Clone, Debug, Serialize)]
pub struct Verified {
    /// Images compared.
    pub images: usize,
    /// Largest absolute difference between resilab's logits and the probe's.
    pub largest_difference: f32,
    /// The probe's largest absolute logit.
    pub largest_logit: f32,
}

/// A probe file's contents.
struct Probe {
    images: Vec<f32>,
    shape: [usize; 4],
    logits: Vec<f32>,
    classes: usize,
    mean: Option<Vec<f32>>,
    std: Option<Vec<f32>>,
}

/// Checks `net` against the probe at `path`, with its images normalised by `norm` for images
/// of `channels` x `size` x `size` and `classes` classes.
pub fn check(
    path: &Path,
    net: &Net,
    model: &str,
    norm: &Normalization,
    input: (usize, usize),
    classes: usize,
    device: &Device,
) -> Result<Verified> {
    let probe = read(path)?;
    let [n, c, h, w] = probe.shape;
    if (c, h, w) != (input.0, input.1, input.1) || probe.classes != classes {
        return Err(Error::file(
            path,
            format!(
                "the probe's images are {c}x{h}x{w} with {} classes, the configured model takes {}x{s}x{s} with {classes}: make the probe with the data and model of this configuration",
                probe.classes,
                input.0,
                s = input.1
            ),
        ));
    }
    let plane = h * w;
    let normalised: Vec<f32> =
        probe.images.iter().enumerate().map(|(i, &p)| (p - norm.mean[i / plane % c]) * (1.0 / norm.std[i / plane % c])).collect();
    let x = Tensor::<4>::from_data(TensorData::new(normalised, [n, c, h, w]), device);
    let got = net.infer(x).into_data().convert::<f32>().try_to_vec::<f32>().map_err(|e| Error::file(path, format!("logits: {e:?}")))?;
    let largest_logit = probe.logits.iter().fold(0f32, |m, v| m.max(v.abs()));
    let largest_difference =
        got.iter().zip(&probe.logits).fold(0f32, |m, (a, b)| if (a - b).is_nan() { f32::INFINITY } else { m.max((a - b).abs()) });
    if largest_difference > TOLERANCE * largest_logit {
        return Err(Error::file(path, mismatch(&probe, model, norm, largest_difference, largest_logit)));
    }
    Ok(Verified { images: n, largest_difference, largest_logit })
}

/// The refusal: how far apart the logits are, and the likely causes, the normalisation first
/// when the probe says it differs.
fn mismatch(probe: &Probe, model: &str, norm: &Normalization, diff: f32, scale: f32) -> String {
    let head = format!(
        "resilab's logits differ from the probe's by up to {diff:.3e} (largest logit {scale:.3e}; allowed {:.1e} relative), so the import is refused",
        TOLERANCE
    );
    let same = |a: &Option<Vec<f32>>, b: &[f32]| {
        a.as_ref().is_none_or(|a| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-6))
    };
    if !same(&probe.mean, &norm.mean) || !same(&probe.std, &norm.std) {
        return format!(
            "{head}: the probe was made with mean {:?} and std {:?}, the configuration normalises with mean {:?} and std {:?}: set data.normalize to the probe's",
            probe.mean.as_deref().unwrap_or_default(),
            probe.std.as_deref().unwrap_or_default(),
            norm.mean,
            norm.std
        );
    }
    format!(
        "{head}: the PyTorch module computes something else than resilab's {model} with these weights. Likely: a stride on another convolution, a max-pool, or another stem (resilab's ResNets have a 3x3 stride-1 CIFAR stem and no max-pool; docs/pytorch/resilab_models.py defines each forward pass)"
    )
}

fn read(path: &Path) -> Result<Probe> {
    let bytes = resilab_limits::read_regular("--probe", path, u64::MAX, "a probe")?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| Error::file(path, format!("is not a safetensors probe: {e}")))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| Error::file(path, format!("is not a safetensors probe: {e}")))?;
    let tensor = |name: &str, dims: usize| -> Result<(Vec<usize>, Vec<f32>)> {
        let view = file.tensor(name).map_err(|_| {
            Error::file(
                path,
                format!("holds no {name:?} tensor: a probe holds \"images\" and \"logits\" (docs/pytorch/resilab_probe.py writes one)"),
            )
        })?;
        if view.dtype() != Dtype::F32 || view.shape().len() != dims {
            return Err(Error::file(
                path,
                format!("{name:?} is {:?} {:?}: expected float32 with {dims} dimensions", view.dtype(), view.shape()),
            ));
        }
        Ok((view.shape().to_vec(), view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()))
    };
    let (shape, images) = tensor("images", 4)?;
    let (lshape, logits) = tensor("logits", 2)?;
    if lshape[0] != shape[0] {
        return Err(Error::file(path, format!("holds {} images and {} rows of logits", shape[0], lshape[0])));
    }
    if images.iter().any(|p| !(0.0..=1.0).contains(p)) {
        return Err(Error::file(path, "holds images outside [0, 1]: a probe holds pixels scaled to [0, 1], before normalisation"));
    }
    if let Some(v) = logits.iter().find(|v| !v.is_finite()) {
        return Err(Error::file(path, format!("holds a logit of {v}: make the probe from a model whose outputs are finite")));
    }
    let list = |key: &str| meta.metadata().as_ref().and_then(|m| m.get(key)).and_then(|v| serde_json::from_str::<Vec<f32>>(v).ok());
    Ok(Probe { images, shape: [shape[0], shape[1], shape[2], shape[3]], logits, classes: lshape[1], mean: list("mean"), std: list("std") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_that_is_a_directory_is_refused_as_a_file_error() {
        let d = tempfile::tempdir().unwrap();
        let e = read(d.path()).err().unwrap();
        assert!(
            matches!(&e, Error::Limits(resilab_limits::FileError::NotRegular { key, kind: "a directory", .. }) if key == "--probe"),
            "{e:?}"
        );
    }
}
