//! Reading another framework's weights: a PyTorch `.pt`/`.pth` file (a `state_dict`, or a
//! training checkpoint that also holds the optimizer's state) through Burn's `burn-store`
//! reader, which parses the pickle without running it, or a `.safetensors` file.
//!
//! [`open`] reads headers only: each tensor's name, type and shape. A tensor's values are read
//! by [`Tensor::load`], after the import has matched its name and shape to the model, and only
//! once the memory budget admits what the read holds. So a tensor the model does not have is
//! reported from its header, never read, and a view on a small storage
//! (`torch.zeros(1).expand(2_400_000_000)`) is never expanded unless the model asks for it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use burn_store::pytorch_reader::{DType, PytorchReader};
use resilab_limits::{Budget, checked_product};

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

/// A tensor of a weights file: what its header says (shape, type), and its values on demand.
pub trait Tensor {
    /// Shape, outermost first (empty for a scalar).
    fn shape(&self) -> &[usize];
    /// Its type and shape for a message (`float32 [2, 2]`), from its header alone.
    fn header(&self) -> String;
    /// Its values, read from the file (and held to the memory budget) only now.
    fn load(&self) -> Result<Host>;
}

impl Tensor for Host {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn header(&self) -> String {
        format!("{} {:?}", if self.integer { "integer" } else { "float" }, self.shape)
    }
    fn load(&self) -> Result<Host> {
        Ok(self.clone())
    }
}

/// A tensor as its file's header describes it; [`Tensor::load`] reads its values, refusing
/// first what the memory budget does not admit.
#[derive(Clone)]
pub struct Stored {
    name: String,
    shape: Vec<usize>,
    dtype: DType,
    data: Data,
    file: Arc<Opened>,
}

/// Where a tensor's bytes are.
#[derive(Clone)]
enum Data {
    /// Burn's reader, and the bytes of its storage a read holds (from the view's offset to its
    /// extent: never more than the storage, whose entry holds at least that much).
    Pytorch { tensor: burn_store::pytorch_reader::Tensor, window: u64 },
    /// This byte range of the file.
    Safetensors { start: u64, len: u64 },
}

/// The weights file, open, and the budget its reads are held to.
struct Opened {
    path: PathBuf,
    budget: Budget,
    /// A safetensors file, read at the offsets its header gives.
    file: Option<Mutex<File>>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored").field("name", &self.name).field("dtype", &self.dtype).field("shape", &self.shape).finish_non_exhaustive()
    }
}

impl Tensor for Stored {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn header(&self) -> String {
        format!("{} {:?}", dtype_name(self.dtype), self.shape)
    }
    fn load(&self) -> Result<Host> {
        let path = &self.file.path;
        let named = |m: String| Error::file(path, format!("tensor {}: {m}", self.name));
        let numel = checked_product(&self.shape.iter().map(|&d| d as u64).collect::<Vec<_>>());
        let bytes = numel.and_then(|n| n.checked_mul(self.dtype.size() as u64));
        let values = numel.and_then(|n| n.checked_mul(4));
        // What the read holds at once: the storage window (or the file's bytes), the tensor's
        // bytes gathered from it, and its f32 values.
        let need = match &self.data {
            Data::Pytorch { window, .. } => bytes.zip(values).and_then(|(b, v)| b.checked_add(v)?.checked_add(*window)),
            Data::Safetensors { len, .. } => values.and_then(|v| v.checked_add(*len)),
        };
        if !self.file.budget.admits(need) {
            return Err(named(format!(
                "{} needs {} of memory to read, more than the budget of {}",
                self.header(),
                resilab_limits::needed(need),
                self.file.budget.describe()
            )));
        }
        let raw = match &self.data {
            Data::Pytorch { tensor, .. } => tensor.read().map_err(|e| named(one_line(&e)))?,
            Data::Safetensors { start, len } => read_range(&self.file, *start, *len).map_err(|e| named(format!("cannot be read: {e}")))?,
        };
        from_bytes(self.dtype, self.shape.clone(), &raw).map_err(named)
    }
}

/// The `len` bytes at `start` of an open safetensors file.
fn read_range(file: &Opened, start: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let mut f = file.file.as_ref().ok_or(std::io::ErrorKind::NotFound)?.lock().unwrap_or_else(|p| p.into_inner());
    f.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    (&mut *f).take(len).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != len {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("the file ends {} bytes into its {len}", bytes.len())));
    }
    Ok(bytes)
}

/// PyTorch's name of a type.
fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F64 => "float64",
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I64 => "int64",
        DType::I32 => "int32",
        DType::I16 => "int16",
        DType::I8 => "int8",
        DType::U64 => "uint64",
        DType::U32 => "uint32",
        DType::U16 => "uint16",
        DType::U8 => "uint8",
        DType::Bool => "bool",
    }
}

/// What a weights file holds: its tensors as `T`, [`Host`] (read) or [`Stored`] (headers
/// only, read on demand).
#[derive(Clone, Debug)]
pub struct Source<T = Host> {
    /// The file.
    pub path: PathBuf,
    /// The model's tensors by the file's names (the training checkpoint's key prefix removed).
    pub model: BTreeMap<String, T>,
    /// The optimizer's per-parameter state, by the parameter's index in the model's
    /// `parameters()` order, then by buffer name (`momentum_buffer`, `exp_avg`, `exp_avg_sq`,
    /// `step`). Empty when the file holds none.
    pub optimizer: BTreeMap<usize, BTreeMap<String, T>>,
    /// Tensors of a training checkpoint outside its model and optimizer entries (left alone).
    pub ignored: Vec<String>,
    /// The key the model's tensors were under (`model_state_dict`, `state_dict`, `model`), if any.
    pub model_key: Option<String>,
    /// The model's tensor names in the file's own order: a PyTorch file's `state_dict` order,
    /// which is its module's registration order and so its `parameters()` order. Empty for a
    /// safetensors file, which keeps no order.
    pub order: Vec<String>,
}

impl<T> Default for Source<T> {
    fn default() -> Self {
        Source {
            path: PathBuf::new(),
            model: BTreeMap::new(),
            optimizer: BTreeMap::new(),
            ignored: Vec::new(),
            model_key: None,
            order: Vec::new(),
        }
    }
}

impl Source<Stored> {
    /// Every tensor read ([`Tensor::load`]), in file order of names.
    pub fn load(self) -> Result<Source<Host>> {
        let load_all = |m: BTreeMap<String, Stored>| m.into_iter().map(|(k, t)| Ok((k, t.load()?))).collect::<Result<BTreeMap<_, _>>>();
        let optimizer = self.optimizer.into_iter().map(|(i, b)| Ok((i, load_all(b)?))).collect::<Result<_>>()?;
        Ok(Source {
            path: self.path,
            model: load_all(self.model)?,
            optimizer,
            ignored: self.ignored,
            model_key: self.model_key,
            order: self.order,
        })
    }
}

/// The prefix of the optimizer entries in a safetensors file `resilab export --optimizer`
/// writes: `optimizer.state.<index>.<buffer>`, numbered as PyTorch's `optimizer.state_dict()`.
pub const OPTIMIZER_PREFIX: &str = "optimizer.state.";

/// Reads every tensor of `path` (see [`open`]), under the process's memory budget.
pub fn read(path: &Path) -> Result<Source> {
    let budget = resilab_limits::memory_budget()?;
    open(path, &budget)?.load()
}

/// Opens `path` (a `.safetensors` file by its extension, anything else as a PyTorch file) and
/// reads what its headers say about each tensor (name, type, shape), but no tensor's values:
/// those are read by [`Tensor::load`], held to `budget`.
pub fn open(path: &Path, budget: &Budget) -> Result<Source<Stored>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::file(path, format!("cannot be read: {e}")))?;
    if !meta.is_file() {
        return Err(Error::file(path, "is not a file"));
    }
    let (tensors, keys) = if path.extension().is_some_and(|e| e == "safetensors") {
        (open_safetensors(path, budget)?, Vec::new())
    } else {
        open_pytorch(path, budget)?
    };
    if tensors.is_empty() {
        return Err(Error::file(path, "holds no tensors: expected a model's state_dict"));
    }
    let mut source = split(path, tensors)?;
    let mut seen = std::collections::BTreeSet::new();
    source.order = keys.into_iter().filter(|k| source.model.contains_key(k) && seen.insert(k.clone())).collect();
    Ok(source)
}

/// The file's tensors, and the names they are set under in the pickle's order.
fn open_pytorch(path: &Path, budget: &Budget) -> Result<(BTreeMap<String, Stored>, Vec<String>)> {
    let unreadable = |e: &dyn std::error::Error| Error::file(path, format!("is not a readable PyTorch file: {}", one_line(e)));
    // The reader never runs the pickle; a file that would run code when PyTorch loads it is
    // refused all the same, before the reader parses it: it is not a state_dict, and whoever made
    // it meant harm or a mistake. The walk reads every opcode against exact lists of names, and
    // refuses a view past its storage or a storage past its entry, naming the tensor.
    let checked = crate::pickle::check(path)?;
    let reader = PytorchReader::new(path).map_err(|e| unreadable(&e))?;
    let file = Arc::new(Opened { path: path.to_path_buf(), budget: budget.clone(), file: None });
    let mut out = BTreeMap::new();
    for (name, t) in reader.into_tensors() {
        let window = window(&checked.views, &name, t.shape(), t.dtype().size() as u64);
        let stored = Stored {
            name: name.clone(),
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
            data: Data::Pytorch { tensor: t, window },
            file: file.clone(),
        };
        out.insert(name, stored);
    }
    Ok((out, checked.keys))
}

/// The storage bytes a read of the reader's tensor `name` holds: the largest window of the views
/// the pickle sets under its last name with its shape and element size (the reader names a
/// tensor by its path through the dicts, the walk by its key in the innermost), else of all.
fn window(views: &[crate::pickle::View], name: &str, shape: &[usize], element: u64) -> u64 {
    let fits = |v: &&crate::pickle::View| {
        v.name.as_deref().is_some_and(|n| name == n || name.strip_suffix(n).is_some_and(|p| p.ends_with('.')))
            && v.element == element
            && v.shape.iter().copied().eq(shape.iter().map(|&d| d as u64))
    };
    let largest = |it: &mut dyn Iterator<Item = &crate::pickle::View>| it.map(|v| v.window_bytes().unwrap_or(u64::MAX)).max();
    largest(&mut views.iter().filter(fits)).or_else(|| largest(&mut views.iter())).unwrap_or(0)
}

/// The safetensors header's entry for one tensor.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Info {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

/// The largest safetensors header read (the format's own limit).
const SAFETENSORS_MAX_HEADER: u64 = 100_000_000;

/// A safetensors file's header, checked as the format's reader checks it (the tensors tile
/// its data exactly, each its type's size times its shape's elements), without its data.
fn open_safetensors(path: &Path, budget: &Budget) -> Result<BTreeMap<String, Stored>> {
    let bad = |m: String| Error::file(path, format!("is not a safetensors file: {m}"));
    let io = |e: std::io::Error| Error::file(path, format!("cannot be read: {e}"));
    let mut f = resilab_limits::RegularFile::open("import", path)?.into_file();
    let len = f.metadata().map_err(io)?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n).map_err(|_| bad("shorter than its 8-byte header length".into()))?;
    let n = u64::from_le_bytes(n);
    if n > SAFETENSORS_MAX_HEADER || n > len - 8 {
        return Err(bad(format!("its header claims {n} bytes; the file holds {} after the length", len - 8)));
    }
    if !budget.admits(Some(n)) {
        return Err(Error::file(path, format!("its {n}-byte header is more than the memory budget of {}", budget.describe())));
    }
    let mut header = Vec::new();
    (&mut f).take(n).read_to_end(&mut header).map_err(io)?;
    let mut infos: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&header).map_err(|e| bad(format!("its header: {e}")))?;
    infos.remove("__metadata__");
    let file = Arc::new(Opened { path: path.to_path_buf(), budget: budget.clone(), file: Some(Mutex::new(f)) });
    let mut spans = Vec::new();
    let mut out = BTreeMap::new();
    for (name, info) in infos {
        let info: Info = serde_json::from_value(info).map_err(|e| bad(format!("tensor {name}: {e}")))?;
        let dtype = safetensors_dtype(&info.dtype).ok_or_else(|| {
            Error::file(path, format!("tensor {name}: type {} is not a floating-point or integer type resilab reads", info.dtype))
        })?;
        let [begin, end] = info.data_offsets;
        let want =
            checked_product(&info.shape.iter().map(|&d| d as u64).collect::<Vec<_>>()).and_then(|e| e.checked_mul(dtype.size() as u64));
        if end < begin || Some(end - begin) != want {
            return Err(bad(format!(
                "tensor {name}: its data offsets [{begin}, {end}] do not hold {} {:?}",
                dtype_name(dtype),
                info.shape
            )));
        }
        spans.push((begin, end, name.clone()));
        let data = Data::Safetensors { start: 8 + n + begin, len: end - begin };
        out.insert(name.clone(), Stored { name, shape: info.shape, dtype, data, file: file.clone() });
    }
    spans.sort();
    let mut next = 0;
    for (begin, end, name) in &spans {
        if *begin != next {
            return Err(bad(format!("tensor {name}: its data starts at byte {begin} of the data, where byte {next} was expected")));
        }
        next = *end;
    }
    if next != len - 8 - n {
        return Err(bad(format!("its tensors hold {next} bytes of data, the file {}", len - 8 - n)));
    }
    Ok(out)
}

/// The types a safetensors file names, as the reader's; `None` for those resilab cannot size.
fn safetensors_dtype(name: &str) -> Option<DType> {
    Some(match name {
        "F64" => DType::F64,
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "I64" => DType::I64,
        "I32" => DType::I32,
        "I16" => DType::I16,
        "I8" => DType::I8,
        "U64" => DType::U64,
        "U32" => DType::U32,
        "U16" => DType::U16,
        "U8" => DType::U8,
        "BOOL" => DType::Bool,
        _ => return None,
    })
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
fn split<T>(path: &Path, tensors: BTreeMap<String, T>) -> Result<Source<T>> {
    let under = |key: &str| tensors.keys().any(|k| k.starts_with(&format!("{key}.")));
    let optimizer_key = OPTIMIZER_KEYS.into_iter().find(|k| under(k));
    // `model.` alone could be a plain state_dict whose first module is named `model`.
    let model_key = MODEL_KEYS.into_iter().find(|k| under(k) && (*k != "model" || optimizer_key.is_some()));
    let safetensors_optimizer = model_key.is_none() && tensors.keys().any(|k| k.starts_with(OPTIMIZER_PREFIX));
    let mut source = Source { model_key: model_key.map(str::to_string), path: path.to_path_buf(), ..Source::default() };
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
        let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F64, vec![3], &data).unwrap();
        std::fs::write(&path, safetensors::tensor::serialize([("fc.weight", view)], None).unwrap()).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.ends_with("wide.safetensors: tensor fc.weight: value -1e300 at element 1 overflows f32 (largest 3.4e38)"), "{e}");
    }

    #[test]
    fn headers_are_read_without_values_and_each_read_is_held_to_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("two.safetensors");
        let (a, b) = (le(&[0.5; 64]), le(&[4.0]));
        let views = [
            ("fc.weight", safetensors::tensor::TensorView::new(safetensors::Dtype::F64, vec![64], &a).unwrap()),
            ("fc.bias", safetensors::tensor::TensorView::new(safetensors::Dtype::F64, vec![1], &b).unwrap()),
        ];
        std::fs::write(&path, safetensors::tensor::serialize(views, None).unwrap()).unwrap();
        // 64 f64 values read (512 bytes) and converted (256): 768 bytes; the header is 128.
        let small = Budget { bytes: 768, source: "test".into() };
        let source = open(&path, &small).unwrap();
        assert_eq!(source.model["fc.weight"].header(), "float64 [64]");
        assert_eq!(source.model["fc.bias"].load().unwrap().values, [4.0]);
        let tiny = Budget { bytes: 767, ..small.clone() };
        let e = open(&path, &tiny).unwrap().model["fc.weight"].load().unwrap_err().to_string();
        assert!(e.ends_with("two.safetensors: tensor fc.weight: float64 [64] needs 768 bytes (768 B) of memory to read, more than the budget of 767 B (test)"), "{e}");
        // Data offsets that do not tile the data are refused, naming the tensor.
        let mut bytes = std::fs::read(&path).unwrap();
        let header = String::from_utf8_lossy(&bytes[8..]).into_owned();
        let at = 8 + header.find("[0,8]").unwrap();
        bytes[at..at + 5].copy_from_slice(b"[0,9]");
        std::fs::write(&path, &bytes).unwrap();
        let e = open(&path, &small).unwrap_err().to_string();
        assert!(e.contains("is not a safetensors file: tensor fc.bias: its data offsets [0, 9] do not hold float64 [1]"), "{e}");
    }
}
