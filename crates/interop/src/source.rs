//! Reading another framework's weights: a PyTorch `.pt`/`.pth` file (a `state_dict`, or a
//! training checkpoint that also holds the optimizer's state) through Burn's `burn-store`
//! reader, which parses the pickle without running it, or a `.safetensors` file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn_store::pytorch_reader::{DType, PytorchReader};
use safetensors::{Dtype as StDtype, SafeTensors};

use crate::{Error, Result};
use resilab_runner::one_line;

/// A tensor read from the file, converted to f32.
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    /// Shape, outermost first (empty for a scalar).
    pub shape: Vec<usize>,
    /// Values, row-major.
    pub values: Vec<f32>,
    /// Whether the file stored integers (`num_batches_tracked`, an optimizer's `step`).
    pub integer: bool,
}

/// What a weights file holds.
#[derive(Clone, Debug, Default)]
pub struct Source {
    /// The file.
    pub path: PathBuf,
    /// The model's tensors by the file's names (the training checkpoint's key prefix removed).
    pub model: BTreeMap<String, Host>,
    /// The optimizer's per-parameter state, by the parameter's index in the model's
    /// `parameters()` order, then by buffer name (`momentum_buffer`, `exp_avg`, `exp_avg_sq`,
    /// `step`). Empty when the file holds none.
    pub optimizer: BTreeMap<usize, BTreeMap<String, Host>>,
    /// Tensors of a training checkpoint outside its model and optimizer entries (left alone).
    pub ignored: Vec<String>,
    /// The key the model's tensors were under (`model_state_dict`, `state_dict`, `model`), if any.
    pub model_key: Option<String>,
    /// The model's tensor names in the file's own order: a PyTorch file's `state_dict` order,
    /// which is its module's registration order and so its `parameters()` order. Empty for a
    /// safetensors file, which keeps no such order.
    pub order: Vec<String>,
}

/// The prefix of the optimizer entries in a safetensors file `resilab export --optimizer`
/// writes: `optimizer.state.<index>.<buffer>`, numbered as PyTorch's `optimizer.state_dict()`.
pub const OPTIMIZER_PREFIX: &str = "optimizer.state.";

/// Reads `path`: a `.safetensors` file by its extension, anything else as a PyTorch file.
pub fn read(path: &Path) -> Result<Source> {
    let meta = std::fs::metadata(path).map_err(|e| Error::file(path, format!("cannot be read: {e}")))?;
    if !meta.is_file() {
        return Err(Error::file(path, "is not a file"));
    }
    let (tensors, keys) =
        if path.extension().is_some_and(|e| e == "safetensors") { (read_safetensors(path)?, Vec::new()) } else { read_pytorch(path)? };
    if tensors.is_empty() {
        return Err(Error::file(path, "holds no tensors: expected a model's state_dict"));
    }
    let mut source = split(path, tensors)?;
    let mut seen = std::collections::BTreeSet::new();
    source.order = keys.into_iter().filter(|k| source.model.contains_key(k) && seen.insert(k.clone())).collect();
    Ok(source)
}

/// The file's tensors, and the names they are set under in the pickle's order.
fn read_pytorch(path: &Path) -> Result<(BTreeMap<String, Host>, Vec<String>)> {
    let unreadable = |e: &dyn std::error::Error| Error::file(path, format!("is not a readable PyTorch file: {}", one_line(e)));
    // The reader never runs the pickle; a file that would run code when PyTorch loads it is
    // refused all the same, before the reader parses it: it is not a state_dict, and whoever made
    // it meant harm or a mistake. The walk reads every opcode against exact lists of names.
    let keys = crate::pickle::check(path)?;
    let reader = PytorchReader::new(path).map_err(|e| unreadable(&e))?;
    let mut out = BTreeMap::new();
    for (name, t) in reader.into_tensors() {
        let bytes = t.read().map_err(|e| Error::file(path, format!("tensor {name}: {}", one_line(&e))))?;
        let host = from_bytes(t.dtype(), t.shape().to_vec(), &bytes).map_err(|m| Error::file(path, format!("tensor {name}: {m}")))?;
        out.insert(name, host);
    }
    Ok((out, keys))
}

fn read_safetensors(path: &Path) -> Result<BTreeMap<String, Host>> {
    let bytes = std::fs::read(path).map_err(|e| Error::file(path, format!("cannot be read: {e}")))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| Error::file(path, format!("is not a safetensors file: {}", one_line(&e))))?;
    let mut out = BTreeMap::new();
    for (name, view) in file.iter() {
        let dtype = match view.dtype() {
            StDtype::F32 => DType::F32,
            StDtype::F64 => DType::F64,
            StDtype::F16 => DType::F16,
            StDtype::BF16 => DType::BF16,
            StDtype::I64 => DType::I64,
            StDtype::I32 => DType::I32,
            other => {
                return Err(Error::file(
                    path,
                    format!("tensor {name}: type {other:?} is not a floating-point or integer type resilab reads"),
                ));
            }
        };
        let host = from_bytes(dtype, view.shape().to_vec(), view.data()).map_err(|m| Error::file(path, format!("tensor {name}: {m}")))?;
        out.insert(name.to_string(), host);
    }
    Ok(out)
}

/// Converts little-endian bytes of `dtype` to f32 (integers exactly up to 2^24; counts beyond
/// round to the nearest f32). A finite f64 beyond f32's range is an error naming it: it would
/// become infinite.
fn from_bytes(dtype: DType, shape: Vec<usize>, bytes: &[u8]) -> std::result::Result<Host, String> {
    let (values, integer): (Vec<f32>, bool) = match dtype {
        DType::F32 => (bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(), false),
        DType::F64 => (narrow_f64(bytes)?, false),
        DType::F16 => (bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(), false),
        DType::BF16 => (bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(), false),
        DType::I64 => (bytes.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f32).collect(), true),
        DType::I32 => (bytes.chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32).collect(), true),
        other => return Err(format!("type {other:?} is not a floating-point or integer type resilab reads")),
    };
    if values.len() != shape.iter().product::<usize>() {
        return Err(format!("{} values for shape {shape:?}", values.len()));
    }
    Ok(Host { shape, values, integer })
}

/// Little-endian f64 values as f32; the first finite value beyond f32's range is an error.
fn narrow_f64(bytes: &[u8]) -> std::result::Result<Vec<f32>, String> {
    let narrow = |(i, b): (usize, &[u8])| {
        let wide = f64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        let value = wide as f32;
        if wide.is_finite() && value.is_infinite() {
            Err(format!("value {wide:e} at element {i} overflows f32 (largest {:.1e})", f32::MAX))
        } else {
            Ok(value)
        }
    };
    bytes.chunks_exact(8).enumerate().map(narrow).collect()
}

/// The keys a training checkpoint keeps its model under, most specific first.
const MODEL_KEYS: [&str; 3] = ["model_state_dict", "state_dict", "model"];
/// The keys a training checkpoint keeps its optimizer under.
const OPTIMIZER_KEYS: [&str; 2] = ["optimizer_state_dict", "optimizer"];

/// Splits the file's tensors into the model's and the optimizer's. A plain `state_dict` is all
/// model; a training checkpoint (a dict with `model_state_dict` / `optimizer_state_dict`, or
/// `state_dict` / `optimizer`, or `model` / `optimizer`) has its entries' prefixes removed.
fn split(path: &Path, tensors: BTreeMap<String, Host>) -> Result<Source> {
    let under = |key: &str| tensors.keys().any(|k| k.starts_with(&format!("{key}.")));
    let optimizer_key = OPTIMIZER_KEYS.into_iter().find(|k| under(k));
    // `model.` alone could be a plain state_dict whose first module is named `model`.
    let model_key = MODEL_KEYS.into_iter().find(|k| under(k) && (*k != "model" || optimizer_key.is_some()));
    let safetensors_optimizer = model_key.is_none() && tensors.keys().any(|k| k.starts_with(OPTIMIZER_PREFIX));
    let mut source = Source { path: path.to_path_buf(), model_key: model_key.map(str::to_string), ..Source::default() };
    for (name, host) in tensors {
        let optim = match optimizer_key {
            Some(k) if model_key.is_some() => name.strip_prefix(&format!("{k}.state.")).map(str::to_string),
            _ if safetensors_optimizer => name.strip_prefix(OPTIMIZER_PREFIX).map(str::to_string),
            _ => None,
        };
        if let Some(rest) = optim {
            let (index, buffer) = rest
                .split_once('.')
                .and_then(|(i, b)| i.parse::<usize>().ok().map(|i| (i, b)))
                .ok_or_else(|| Error::file(path, format!("optimizer entry {name}: expected state.<index>.<buffer>")))?;
            source.optimizer.entry(index).or_default().insert(buffer.to_string(), host);
            continue;
        }
        match model_key {
            Some(k) => match name.strip_prefix(&format!("{k}.")) {
                Some(rest) => {
                    source.model.insert(rest.to_string(), host);
                }
                None => source.ignored.push(name),
            },
            None => {
                source.model.insert(name, host);
            }
        }
    }
    if source.model.is_empty() {
        return Err(Error::file(path, "holds no model tensors: expected a state_dict, or a training checkpoint with model_state_dict"));
    }
    Ok(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(values: &[f64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn an_f64_beyond_f32s_range_is_an_error_naming_the_tensor_and_the_value() {
        let e = from_bytes(DType::F64, vec![2, 2], &le(&[0.0, 1.5, -2.0, 1e300])).unwrap_err();
        assert_eq!(e, "value 1e300 at element 3 overflows f32 (largest 3.4e38)");
        let e = from_bytes(DType::F64, vec![3], &le(&[-3.5e38, 1.0, 1e300])).unwrap_err();
        assert_eq!(e, "value -3.5e38 at element 0 overflows f32 (largest 3.4e38)");
        // What f32 holds, infinities and NaN stay as they are; values too small for f32 become 0.
        let fine = [f64::from(f32::MAX), -f64::from(f32::MAX), f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-300, 0.1];
        let host = from_bytes(DType::F64, vec![fine.len()], &le(&fine)).unwrap();
        let want: Vec<f32> = fine.iter().map(|&v| v as f32).collect();
        assert_eq!(host.values.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        // The file's error names the tensor.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wide.safetensors");
        let data = le(&[1.0, -1e300, 2.0]);
        let view = safetensors::tensor::TensorView::new(StDtype::F64, vec![3], &data).unwrap();
        std::fs::write(&path, safetensors::tensor::serialize([("fc.weight", view)], None).unwrap()).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.ends_with("wide.safetensors: tensor fc.weight: value -1e300 at element 1 overflows f32 (largest 3.4e38)"), "{e}");
    }
}
