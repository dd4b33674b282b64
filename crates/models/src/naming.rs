//! PyTorch-style names for every parameter and buffer of a [`Net`], and by-name access.
//!
//! Burn reports a parameter's position as a stack of module entries, for example
//! `blocks / 3 / Basic / bn1 / weight`. [`NAME_TABLE`] and [`burn_path_to_name`] turn that into
//! the name a PyTorch `state_dict` would use (`layer1.0.bn1.weight`): the `blocks.<i>` prefix
//! becomes the block's name and enum variant entries are dropped. The layers in
//! [`crate::layers`] already use PyTorch's field names (`weight`, `bias`, `running_mean`,
//! `running_var`), so no leaf renaming is needed for them; the table records the Burn names that
//! resilab's layers replaced, for readers comparing with Burn's own modules.

use burn::module::{ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::prelude::*;

use crate::net::Net;

/// Burn's name for a leaf, and the PyTorch `state_dict` name resilab uses for it.
pub const NAME_TABLE: &[(&str, &str)] = &[
    ("gamma", "weight"),
    ("beta", "bias"),
    ("running_mean", "running_mean"),
    ("running_var", "running_var"),
    ("weight", "weight"),
    ("bias", "bias"),
];

/// Optimizer state names, as in PyTorch's `optimizer.state_dict()`.
pub const OPTIMIZER_STATE_NAMES: &[&str] = &["momentum_buffer", "exp_avg", "exp_avg_sq"];

/// What kind of layer a parameter belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Convolution weight or bias.
    Conv,
    /// Linear weight or bias.
    Linear,
    /// BatchNorm affine parameter or running statistic.
    BatchNorm,
}

/// One parameter or buffer of a network.
#[derive(Clone, Debug)]
pub struct ParamInfo {
    /// PyTorch-style name, e.g. `layer1.0.conv1.weight`.
    pub name: String,
    /// Burn's id (changes when a model is rebuilt; never persist it).
    pub id: ParamId,
    /// Natural shape.
    pub shape: Vec<usize>,
    /// Whether the optimizer updates it (false for BatchNorm running statistics).
    pub trainable: bool,
    /// Layer the parameter belongs to.
    pub kind: LayerKind,
}

impl ParamInfo {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether a step's passes read it through a copy in the run's format (autocast's half
    /// copy in bf16 and fp16): trainable convolution and linear weights and biases; BatchNorm
    /// computes in float32.
    pub fn has_weight_copy(&self) -> bool {
        self.trainable && matches!(self.kind, LayerKind::Conv | LayerKind::Linear)
    }
}

/// Converts Burn's module path (entries of `(name, container_type)`) into a PyTorch-style name.
pub fn burn_path_to_name(stack: &[(String, String)], block_names: &[String]) -> String {
    let mut parts: Vec<&str> = Vec::with_capacity(stack.len());
    let mut i = 0;
    while i < stack.len() {
        let (name, container) = (&stack[i].0, &stack[i].1);
        if container.starts_with("Enum:") {
            i += 1;
            continue;
        }
        if name == "blocks"
            && container == "Struct:Net"
            && let Some(block) = stack.get(i + 1).and_then(|(idx, _)| idx.parse::<usize>().ok()).and_then(|idx| block_names.get(idx))
        {
            parts.push(block);
            i += 2;
            continue;
        }
        let leaf = NAME_TABLE.iter().find(|(burn, _)| *burn == name).map_or(name.as_str(), |(_, torch)| torch);
        parts.push(leaf);
        i += 1;
    }
    parts.join(".")
}

/// Whether a parameter is updated by the optimizer: everything but BatchNorm running
/// statistics (decided by name, so the answer does not depend on the device's autodiff state).
pub fn is_trainable(name: &str) -> bool {
    !matches!(name.rsplit('.').next(), Some("running_mean" | "running_var"))
}

fn kind_of(stack: &[(String, String)]) -> LayerKind {
    match stack.last().map(|(_, c)| c.as_str()) {
        Some("Struct:BatchNorm2d") => LayerKind::BatchNorm,
        Some("Struct:Linear") => LayerKind::Linear,
        _ => LayerKind::Conv,
    }
}

/// The module path a visitor or mapper is at, and the description of the parameter there.
struct PathStack {
    entries: Vec<(String, String)>,
    block_names: Vec<String>,
}

impl PathStack {
    fn new(net: &Net) -> Self {
        Self { entries: Vec::new(), block_names: net.block_names.clone() }
    }
    fn enter(&mut self, name: &str, container_type: &str) {
        self.entries.push((name.to_string(), container_type.to_string()));
    }
    fn exit(&mut self) {
        self.entries.pop();
    }
    fn info(&self, id: ParamId, shape: Vec<usize>) -> ParamInfo {
        let name = burn_path_to_name(&self.entries, &self.block_names);
        ParamInfo { trainable: is_trainable(&name), name, id, shape, kind: kind_of(&self.entries) }
    }
}

struct Lister {
    path: PathStack,
    out: Vec<ParamInfo>,
}

impl ModuleVisitor for Lister {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.out.push(self.path.info(param.id, param.shape().dims::<D>().to_vec()));
    }
}

impl Net {
    /// Number of scalar values in all parameters and buffers.
    pub fn num_values(&self) -> usize {
        named_params(self).iter().map(|p| p.numel()).sum()
    }

    /// Number of trainable scalars.
    pub fn num_trainable(&self) -> usize {
        named_params(self).iter().filter(|p| p.trainable).map(|p| p.numel()).sum()
    }
}

/// Every parameter and buffer of `net`, in module order.
pub fn named_params(net: &Net) -> Vec<ParamInfo> {
    let mut lister = Lister { path: PathStack::new(net), out: Vec::new() };
    net.visit(&mut lister);
    lister.out
}

/// Every trainable parameter of `net` in the order a backward pass makes its gradient ready,
/// as PyTorch's autograd does for the same network (`docs/pytorch/resilab_models.py`; the order
/// DDP's `Reducer` records in its first iteration and fills its buckets in): the blocks last to
/// first, each block's layers as [`crate::Block::backward_layers`] lists them, a convolution's
/// or BatchNorm's weight before its bias (one backward node computes both) and a linear
/// layer's bias before its weight (`addmm` gives the bias its gradient first).
/// `scripts/ddp_check.py` compares it with PyTorch's for every model family.
pub fn gradient_ready_order(net: &Net) -> Vec<ParamInfo> {
    let params: Vec<ParamInfo> = named_params(net).into_iter().filter(|p| p.trainable).collect();
    let mut out = Vec::with_capacity(params.len());
    for (block, name) in net.blocks.iter().zip(&net.block_names).rev() {
        for layer in block.backward_layers() {
            let prefix = format!("{name}.{layer}.");
            let mut leaves: Vec<&ParamInfo> =
                params.iter().filter(|p| p.name.strip_prefix(&prefix).is_some_and(|leaf| !leaf.contains('.'))).collect();
            if leaves.first().is_some_and(|p| p.kind == LayerKind::Linear) {
                leaves.reverse();
            }
            out.extend(leaves.into_iter().cloned());
        }
    }
    out
}

struct Reader<F> {
    path: PathStack,
    f: F,
}

impl<F: FnMut(&ParamInfo, Tensor<1>)> ModuleVisitor for Reader<F> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        let info = self.path.info(param.id, value.dims().to_vec());
        let n = info.numel();
        (self.f)(&info, value.reshape([n]));
    }
}

/// Calls `f` with every parameter's description and its values flattened to one dimension.
pub fn for_each_param(net: &Net, f: impl FnMut(&ParamInfo, Tensor<1>)) {
    let mut reader = Reader { path: PathStack::new(net), f };
    net.visit(&mut reader);
}

struct Updater<'a, F> {
    path: PathStack,
    f: &'a mut F,
}

impl<F: FnMut(&ParamInfo, Tensor<1>) -> Tensor<1>> ModuleMapper for Updater<'_, F> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (id, value, mapper) = param.consume();
        let shape: [usize; D] = value.dims();
        let info = self.path.info(id, shape.to_vec());
        let (n, autodiff) = (info.numel(), value.is_autodiff());
        let new = (self.f)(&info, value.without_autodiff().reshape([n])).reshape(shape);
        let value = match (autodiff, info.trainable) {
            (true, true) => new.autodiff().require_grad(),
            (true, false) => new.autodiff(),
            (false, _) => new,
        };
        Param::from_mapped_value(id, value, mapper)
    }
}

/// Replaces every parameter: `f` receives each parameter's description and its values,
/// flattened, without autodiff and owned (no other copy is kept here, so an update can write
/// into the values when nothing else holds them), and returns the new flattened values (same
/// length; return the argument to keep a parameter). Autodiff and trainability are kept.
pub fn update_params(net: Net, mut f: impl FnMut(&ParamInfo, Tensor<1>) -> Tensor<1>) -> Net {
    let mut updater = Updater { path: PathStack::new(&net), f: &mut f };
    net.map(&mut updater)
}

/// Replaces parameters by name: `f` receives each parameter's description and flattened values
/// and returns new flattened values (same length) or `None` to keep it. Trainability is kept.
pub fn map_params(net: Net, mut f: impl FnMut(&ParamInfo, Tensor<1>) -> Option<Tensor<1>>) -> Net {
    update_params(net, |info, value| f(info, value.clone()).unwrap_or(value))
}

/// Where a tensor of a run is found by name: the path of its dataset in a checkpoint file,
/// which the fault log, `locations_to_corrupt` and `runs.csv` use too. A parameter or buffer
/// of the model lies under `model/`, an optimizer buffer under `optimizer/<parameter>/<buffer>`,
/// and a gradient (never stored; named so by faults that hit one) under `gradients/`. The
/// PyTorch name's dots become slashes: `layer1.0.conv1.weight` is `model/layer1/0/conv1/weight`.
/// A `Model` name may also be a module's (`layer1.0.bn1`): the group of its tensors.
///
/// [`Display`](std::fmt::Display) writes the path without a leading slash,
/// [`DatasetPath::absolute`] with one (HDF5's form); [`FromStr`](std::str::FromStr) reads both.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DatasetPath {
    /// A parameter or buffer of the model (or a module), by its PyTorch name.
    Model(String),
    /// An optimizer buffer (one of [`OPTIMIZER_STATE_NAMES`] when resilab wrote it).
    Optimizer {
        /// The parameter's PyTorch name.
        param: String,
        /// The buffer's name (`momentum_buffer`).
        buffer: String,
    },
    /// A parameter's gradient, by the parameter's PyTorch name.
    Gradient(String),
}

/// The kind of tensor a [`DatasetPath`] names, by the path's first component.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DatasetKind {
    /// `model/`: parameters and buffers of the model.
    Model,
    /// `optimizer/`: optimizer buffers.
    Optimizer,
    /// `gradients/`: gradients of the parameters.
    Gradient,
}

impl DatasetKind {
    /// The path's first component.
    pub fn root(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Optimizer => "optimizer",
            Self::Gradient => "gradients",
        }
    }

    /// The kind of tensor `path` (with or without its leading slash) lies under, if any, and
    /// the rest of the path: `/optimizer/fc` is under `optimizer/`, though it names no buffer.
    pub fn of(path: &str) -> Option<(Self, &str)> {
        let (root, rest) = path.strip_prefix('/').unwrap_or(path).split_once('/')?;
        [Self::Model, Self::Optimizer, Self::Gradient].into_iter().find(|k| k.root() == root).map(|k| (k, rest))
    }
}

/// A path that names no model, optimizer or gradient tensor.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: not model/<parameter>, optimizer/<parameter>/<buffer> or gradients/<parameter>")]
pub struct BadDatasetPath {
    /// The path as given.
    pub path: String,
}

impl DatasetPath {
    /// The path with its leading slash, as HDF5 names the dataset (`/model/fc/bias`).
    pub fn absolute(&self) -> String {
        format!("/{self}")
    }

    /// The group an optimizer parameter's buffers lie in, which carries its step count:
    /// `/optimizer/layer1/0/conv1/weight` for `layer1.0.conv1.weight`.
    pub fn optimizer_group(param: &str) -> String {
        format!("/{}/{}", DatasetKind::Optimizer.root(), slashed(param))
    }

    /// The kind of tensor the path names.
    pub fn kind(&self) -> DatasetKind {
        match self {
            Self::Model(_) => DatasetKind::Model,
            Self::Optimizer { .. } => DatasetKind::Optimizer,
            Self::Gradient(_) => DatasetKind::Gradient,
        }
    }

    /// The path below its root: `layer1/0/conv1/weight` for `model/layer1/0/conv1/weight`.
    pub fn rest(&self) -> String {
        match self {
            Self::Model(name) | Self::Gradient(name) => slashed(name),
            Self::Optimizer { param, buffer } => format!("{}/{buffer}", slashed(param)),
        }
    }

    /// The PyTorch name of the parameter (or module) the path belongs to.
    pub fn param(&self) -> &str {
        match self {
            Self::Model(name) | Self::Gradient(name) | Self::Optimizer { param: name, .. } => name,
        }
    }
}

/// `layer1.0.conv1.weight` → `layer1/0/conv1/weight`.
fn slashed(name: &str) -> String {
    name.replace('.', "/")
}

impl std::fmt::Display for DatasetPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind().root(), self.rest())
    }
}

impl std::str::FromStr for DatasetPath {
    type Err = BadDatasetPath;

    fn from_str(path: &str) -> std::result::Result<Self, BadDatasetPath> {
        let bad = || BadDatasetPath { path: path.to_string() };
        let (kind, rest) = DatasetKind::of(path).ok_or_else(bad)?;
        if rest.split('/').any(str::is_empty) {
            return Err(bad());
        }
        let dotted = |p: &str| p.replace('/', ".");
        match kind {
            DatasetKind::Model => Ok(Self::Model(dotted(rest))),
            DatasetKind::Gradient => Ok(Self::Gradient(dotted(rest))),
            DatasetKind::Optimizer => {
                let (param, buffer) = rest.rsplit_once('/').ok_or_else(bad)?;
                Ok(Self::Optimizer { param: dotted(param), buffer: buffer.to_string() })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready_order(arch: crate::Arch, depth: Option<usize>, batch_norm: Option<bool>) -> (Vec<String>, Vec<String>) {
        let cfg = crate::ModelConfig { arch, depth, width: 0.25, batch_norm };
        let net = cfg.build(crate::InputShape { channels: 3, size: 16 }, 10, &Device::flex()).unwrap();
        let order = gradient_ready_order(&net).into_iter().map(|p| p.name).collect();
        let trainable = named_params(&net).into_iter().filter(|p| p.trainable).map(|p| p.name).collect();
        (order, trainable)
    }

    #[test]
    fn gradient_ready_order_is_pytorchs_and_holds_every_trainable_parameter_once() {
        // PyTorch 2.9's autograd on docs/pytorch/resilab_models.py's resnet(8, 0.25), one
        // post-accumulate-grad hook per parameter.
        let torch: Vec<String> = "classifier.fc.bias classifier.fc.weight \
            layer3.0.bn2.weight layer3.0.bn2.bias layer3.0.conv2.weight layer3.0.bn1.weight layer3.0.bn1.bias layer3.0.conv1.weight \
            layer3.0.downsample.bn.weight layer3.0.downsample.bn.bias layer3.0.downsample.conv.weight \
            layer2.0.bn2.weight layer2.0.bn2.bias layer2.0.conv2.weight layer2.0.bn1.weight layer2.0.bn1.bias layer2.0.conv1.weight \
            layer2.0.downsample.bn.weight layer2.0.downsample.bn.bias layer2.0.downsample.conv.weight \
            layer1.0.bn2.weight layer1.0.bn2.bias layer1.0.conv2.weight layer1.0.bn1.weight layer1.0.bn1.bias layer1.0.conv1.weight \
            stem.bn.weight stem.bn.bias stem.conv.weight"
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(ready_order(crate::Arch::Resnet, Some(8), None).0, torch);
        // VGG and AlexNet: a convolution's weight before its bias, a linear layer's bias first.
        let (vgg, _) = ready_order(crate::Arch::Vgg, Some(11), Some(true));
        assert_eq!(
            vgg[..6],
            [
                "classifier.fc.bias",
                "classifier.fc.weight",
                "features.7.bn.weight",
                "features.7.bn.bias",
                "features.7.conv.weight",
                "features.7.conv.bias"
            ]
        );
        let (alexnet, _) = ready_order(crate::Arch::Alexnet, None, Some(false));
        assert_eq!(alexnet[4..8], ["classifier.fc1.bias", "classifier.fc1.weight", "features.4.conv.weight", "features.4.conv.bias"]);
        for (arch, depth, bn) in
            [(crate::Arch::Resnet, Some(20), None), (crate::Arch::Vgg, Some(16), Some(false)), (crate::Arch::Alexnet, None, Some(true))]
        {
            let (mut order, mut trainable) = ready_order(arch, depth, bn);
            assert_eq!(order.len(), trainable.len(), "{arch:?}");
            order.sort();
            trainable.sort();
            assert_eq!(order, trainable, "{arch:?}");
        }
    }

    #[test]
    fn dataset_paths_write_and_read_back() {
        let cases = [
            (DatasetPath::Model("layer1.0.conv1.weight".into()), "model/layer1/0/conv1/weight"),
            (DatasetPath::Model("layer1.0.bn1".into()), "model/layer1/0/bn1"),
            (
                DatasetPath::Optimizer { param: "classifier.fc.bias".into(), buffer: "exp_avg".into() },
                "optimizer/classifier/fc/bias/exp_avg",
            ),
            (DatasetPath::Gradient("stem.conv.weight".into()), "gradients/stem/conv/weight"),
        ];
        for (p, text) in cases {
            assert_eq!(DatasetKind::of(text).map(|(k, _)| k), Some(p.kind()));
            assert_eq!(p.to_string(), text);
            assert_eq!(format!("{}/{}", p.kind().root(), p.rest()), text);
            assert_eq!(p.absolute(), format!("/{text}"));
            assert_eq!(text.parse::<DatasetPath>(), Ok(p.clone()), "{text}");
            assert_eq!(format!("/{text}").parse::<DatasetPath>(), Ok(p), "/{text}");
        }
        assert_eq!(DatasetPath::optimizer_group("layer1.0.conv1.weight"), "/optimizer/layer1/0/conv1/weight");
        assert_eq!(DatasetKind::of("/optimizer/fc"), Some((DatasetKind::Optimizer, "fc")), "a kind without a whole path");
        assert_eq!(DatasetKind::of("/train_state/step"), None);
    }

    #[test]
    fn paths_of_no_tensor_are_refused_by_name() {
        for text in ["model", "model/", "/train_state/step", "optimizer/fc", "model//fc", "neurons/layer1/0", ""] {
            let e = text.parse::<DatasetPath>().unwrap_err();
            assert_eq!(e.path, text);
            assert!(e.to_string().starts_with(&format!("{text}: not model/")), "{e}");
        }
    }
}
