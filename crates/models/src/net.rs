//! Network configuration and the [`Net`] container: an ordered list of named blocks.

use std::ops::Range;

use burn::module::Module;
use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::blocks::{BasicBlock, Block, ConvUnit, MlpHead, Mode, PoolHead};
use crate::kernels::Kernels;
use crate::layers::Linear;
use crate::precision::{Exec, Precision};
use crate::{Error, Result};

/// Architecture family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// ResNet with BasicBlocks: CIFAR-style depths 6n+2 (8, 20, 32, 56, ...) or 18/34.
    Resnet,
    /// VGG: 11 or 16 layers, optional BatchNorm.
    Vgg,
    /// AlexNet-style: 5 convolutions and 3 fully connected layers, for small images.
    Alexnet,
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Arch::Resnet => "resnet",
            Arch::Vgg => "vgg",
            Arch::Alexnet => "alexnet",
        })
    }
}

fn default_width() -> f64 {
    1.0
}

/// The `[model]` section of a run configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// `resnet`, `vgg` or `alexnet`.
    pub arch: Arch,
    /// Depth: ResNet 6n+2 (8, 20, 32, 56, ...) or 18/34; VGG 11 or 16; ignored for AlexNet.
    #[serde(default)]
    pub depth: Option<usize>,
    /// Channel width multiplier (1.0 = the published widths).
    #[serde(default = "default_width")]
    pub width: f64,
    /// BatchNorm after each convolution. ResNet always has it; VGG defaults to true;
    /// AlexNet defaults to false.
    #[serde(default)]
    pub batch_norm: Option<bool>,
}

/// Shape of the images a network consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InputShape {
    /// Channels (1 or 3).
    pub channels: usize,
    /// Height and width (square images; 28 and 32 are the supported sizes).
    pub size: usize,
}

const VGG11: &[usize] = &[64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0];
const VGG16: &[usize] = &[64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0];

impl ModelConfig {
    /// A short readable name such as `resnet20`, `vgg11-bn-w0.25` or `alexnet-w0.5`.
    pub fn label(&self) -> String {
        let mut s = match (self.arch, self.depth) {
            (Arch::Alexnet, _) => "alexnet".to_string(),
            (a, Some(d)) => format!("{a}{d}"),
            (a, None) => a.to_string(),
        };
        if self.arch == Arch::Vgg && self.batch_norm.unwrap_or(true) {
            s.push_str("-bn");
        }
        if self.width != 1.0 {
            s.push_str(&format!("-w{}", self.width));
        }
        s
    }

    /// Checks the configuration without building anything.
    pub fn validate(&self, input: InputShape, classes: usize) -> Result<()> {
        if !(self.width.is_finite() && self.width > 0.0 && self.width <= 16.0) {
            return Err(Error::Config(format!("model.width = {} must be in (0, 16]", self.width)));
        }
        if !matches!(input.channels, 1 | 3) {
            return Err(Error::Config(format!("input channels = {} (allowed: 1, 3)", input.channels)));
        }
        if !(8..=64).contains(&input.size) {
            return Err(Error::Config(format!("image size = {} (supported: 8 to 64; 28 and 32 are the tested sizes)", input.size)));
        }
        if classes < 2 {
            return Err(Error::Config(format!("{classes} classes: need at least 2")));
        }
        match (self.arch, self.depth) {
            (Arch::Resnet, Some(18 | 34)) => {}
            (Arch::Resnet, Some(d)) if d >= 8 && (d - 2) % 6 == 0 => {}
            (Arch::Resnet, d) => {
                return Err(Error::Config(format!(
                    "model.depth = {d:?} for arch \"resnet\" (allowed: 6n+2 such as 8, 20, 32, 56; or 18, 34)"
                )));
            }
            (Arch::Vgg, Some(11 | 16)) => {}
            (Arch::Vgg, d) => {
                return Err(Error::Config(format!("model.depth = {d:?} for arch \"vgg\" (allowed: 11, 16)")));
            }
            (Arch::Alexnet, _) => {}
        }
        if self.arch == Arch::Resnet && self.batch_norm == Some(false) {
            return Err(Error::Config("model.batch_norm = false is not supported for resnet (BasicBlocks use BatchNorm)".into()));
        }
        Ok(())
    }

    fn ch(&self, c: usize) -> usize {
        ((c as f64 * self.width).round() as usize).max(1)
    }

    /// The blocks of the network, named, as shapes only: what [`ModelConfig::build`] builds and
    /// [`ModelConfig::footprint`] counts, computed without allocating a tensor.
    fn plan(&self, input: InputShape, classes: usize) -> Result<Vec<(String, Spec)>> {
        self.validate(input, classes)?;
        let mut blocks = Vec::new();
        let mut push = |name: String, b: Spec| blocks.push((name, b));
        match self.arch {
            Arch::Resnet => {
                let depth = self.depth.unwrap_or(20);
                let (widths, counts): (Vec<usize>, Vec<usize>) = match depth {
                    18 => (vec![64, 128, 256, 512], vec![2, 2, 2, 2]),
                    34 => (vec![64, 128, 256, 512], vec![3, 4, 6, 3]),
                    d => (vec![16, 32, 64], vec![(d - 2) / 6; 3]),
                };
                let mut c = self.ch(widths[0]);
                push("stem".into(), Spec::Conv { c_in: input.channels, c_out: c, k: 3, bias: false, bn: true, pool: false });
                for (li, (&w, &n)) in widths.iter().zip(&counts).enumerate() {
                    let out = self.ch(w);
                    for bi in 0..n {
                        let stride = if li > 0 && bi == 0 { 2 } else { 1 };
                        push(format!("layer{}.{bi}", li + 1), Spec::Basic { c_in: c, c_out: out, stride });
                        c = out;
                    }
                }
                push("classifier".into(), Spec::PoolHead { c_in: c, classes });
            }
            Arch::Vgg => {
                let cfg = if self.depth == Some(16) { VGG16 } else { VGG11 };
                let bn = self.batch_norm.unwrap_or(true);
                let mut c = input.channels;
                let mut size = input.size;
                let mut i = 0;
                while i < cfg.len() {
                    let out = self.ch(cfg[i]);
                    // A pool that follows this conv in the configuration; skipped once the
                    // feature map is too small to halve (28x28 inputs).
                    let pool = cfg.get(i + 1) == Some(&0) && size >= 2;
                    if pool {
                        size /= 2;
                    }
                    let name = format!("features.{}", i - cfg[..i].iter().filter(|&&c| c == 0).count());
                    push(name, Spec::Conv { c_in: c, c_out: out, k: 3, bias: true, bn, pool });
                    c = out;
                    i += if cfg.get(i + 1) == Some(&0) { 2 } else { 1 };
                }
                push("classifier".into(), Spec::PoolHead { c_in: c, classes });
            }
            Arch::Alexnet => {
                let bn = self.batch_norm.unwrap_or(false);
                let spec = [(64, 5, true), (192, 5, true), (384, 3, false), (256, 3, false), (256, 3, true)];
                let mut c = input.channels;
                let mut size = input.size;
                for (i, &(w, k, pool)) in spec.iter().enumerate() {
                    let out = self.ch(w);
                    push(format!("features.{i}"), Spec::Conv { c_in: c, c_out: out, k, bias: true, bn, pool });
                    if pool {
                        size /= 2;
                    }
                    c = out;
                }
                push("classifier".into(), Spec::MlpHead { flat: c * size * size, h1: self.ch(1024), h2: self.ch(512), classes });
            }
        }
        Ok(blocks)
    }

    /// Builds the network with zero parameters; call [`crate::init_parameters`] to initialise.
    pub fn build(&self, input: InputShape, classes: usize, device: &Device) -> Result<Net> {
        let mut blocks = Vec::new();
        let mut block_names = Vec::new();
        for (name, spec) in self.plan(input, classes)? {
            block_names.push(name);
            blocks.push(match spec {
                Spec::Conv { c_in, c_out, k, bias, bn, pool } => Block::Conv(ConvUnit::new(c_in, c_out, k, bias, bn, pool, device)),
                Spec::Basic { c_in, c_out, stride } => Block::Basic(BasicBlock::new(c_in, c_out, stride, device)),
                Spec::PoolHead { c_in, classes } => Block::PoolHead(PoolHead { fc: Linear::new(c_in, classes, device) }),
                Spec::MlpHead { flat, h1, h2, classes } => Block::MlpHead(MlpHead {
                    fc1: Linear::new(flat, h1, device),
                    fc2: Linear::new(h1, h2, device),
                    fc3: Linear::new(h2, classes, device),
                }),
            });
        }
        Ok(Net { blocks, block_names, kernels: Kernels::Burn, precision: Precision::Fp32 })
    }

    /// What the network holds and computes with, counted from the configuration without
    /// building it: every parameter and buffer, and an estimate of the activations one image
    /// keeps for the backward pass. A model too large for memory is refused from this before
    /// anything is allocated.
    pub fn footprint(&self, input: InputShape, classes: usize) -> Result<Footprint> {
        let mut f = Footprint::default();
        let mut hw = input.size as u64;
        let add = |total: &mut u64, n: u64| *total = total.saturating_add(n);
        for (_, spec) in self.plan(input, classes)? {
            let (values, trainable, acts) = spec.count(&mut hw);
            add(&mut f.values, values);
            add(&mut f.trainable, trainable);
            add(&mut f.activations_per_image, acts);
        }
        Ok(f)
    }
}

/// A block's shape, without its tensors (see [`ModelConfig::footprint`]).
#[derive(Clone, Copy, Debug)]
enum Spec {
    Conv { c_in: usize, c_out: usize, k: usize, bias: bool, bn: bool, pool: bool },
    Basic { c_in: usize, c_out: usize, stride: usize },
    PoolHead { c_in: usize, classes: usize },
    MlpHead { flat: usize, h1: usize, h2: usize, classes: usize },
}

/// Values (all), trainable values and activation values per image of a convolution from `c_in`
/// to `c_out` channels with a `k`x`k` kernel, a bias when `bias`, a BatchNorm when `bn`, on an
/// output of `hw` x `hw`: its output, the BatchNorm's and the ReLU's are kept for backward.
fn conv_counts(c_in: u64, c_out: u64, k: u64, bias: bool, bn: bool, hw: u64) -> (u64, u64, u64) {
    let weights = c_out.saturating_mul(c_in).saturating_mul(k * k).saturating_add(if bias { c_out } else { 0 });
    let (trainable, buffers) = if bn { (weights + 2 * c_out, 2 * c_out) } else { (weights, 0) };
    let kept = if bn { 3 } else { 2 };
    (trainable + buffers, trainable, c_out.saturating_mul(hw * hw).saturating_mul(kept))
}

impl Spec {
    /// Values, trainable values and activations per image; `hw` is the input's side on entry
    /// and the output's on return.
    fn count(self, hw: &mut u64) -> (u64, u64, u64) {
        let u = |n: usize| n as u64;
        match self {
            Spec::Conv { c_in, c_out, k, bias, bn, pool } => {
                let c = conv_counts(u(c_in), u(c_out), u(k), bias, bn, *hw);
                if pool {
                    *hw /= 2;
                }
                c
            }
            Spec::Basic { c_in, c_out, stride } => {
                let o = hw.div_ceil(u(stride).max(1));
                let a = conv_counts(u(c_in), u(c_out), 3, false, true, o);
                let b = conv_counts(u(c_out), u(c_out), 3, false, true, o);
                let d = if stride != 1 || c_in != c_out { conv_counts(u(c_in), u(c_out), 1, false, true, o) } else { (0, 0, 0) };
                *hw = o;
                (a.0 + b.0 + d.0, a.1 + b.1 + d.1, a.2 + b.2 + d.2)
            }
            Spec::PoolHead { c_in, classes } => {
                let n = u(c_in) * u(classes) + u(classes);
                *hw = 1;
                (n, n, u(c_in) + u(classes))
            }
            Spec::MlpHead { flat, h1, h2, classes } => {
                let n = [(flat, h1), (h1, h2), (h2, classes)].iter().map(|&(i, o)| u(i).saturating_mul(u(o)) + u(o)).sum();
                *hw = 1;
                (n, n, 2 * (u(h1) + u(h2)) + u(classes))
            }
        }
    }
}

/// What [`ModelConfig::footprint`] counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Scalar values of all parameters and buffers (BatchNorm statistics included).
    pub values: u64,
    /// Of those, trainable (what gradients and optimizer state are kept for).
    pub trainable: u64,
    /// Activation values one image keeps for the backward pass (an estimate: the output of
    /// each convolution, BatchNorm and ReLU, and of each linear layer).
    pub activations_per_image: u64,
}

/// A network: an ordered list of named blocks. Block names (`stem`, `layer1.0`, `features.3`,
/// `classifier`) prefix the PyTorch-style names of their parameters.
#[derive(Module, Debug)]
pub struct Net {
    /// The blocks, applied in order.
    pub blocks: Vec<Block>,
    /// One name per block.
    pub block_names: Vec<String>,
    /// The operations the blocks run ([`Kernels::Burn`] as built; see [`Net::with_kernels`]).
    #[module(skip)]
    pub kernels: Kernels,
    /// The format the blocks compute in ([`Precision::Fp32`] as built; see
    /// [`Net::with_precision`]).
    #[module(skip)]
    pub precision: Precision,
}

impl Net {
    /// Moves the network out of `self`, leaving an empty one: for a function that consumes
    /// the network (an optimizer step) without a second handle on its parameters.
    pub fn take(&mut self) -> Net {
        Net { blocks: std::mem::take(&mut self.blocks), block_names: std::mem::take(&mut self.block_names), ..*self }
    }

    /// The same network, running `kernels` from now on.
    pub fn with_kernels(self, kernels: Kernels) -> Net {
        Net { kernels, ..self }
    }

    /// The same network, computing in `precision` from now on (its parameters stay float32).
    pub fn with_precision(self, precision: Precision) -> Net {
        Net { precision, ..self }
    }

    /// How the blocks run: the kernels and the format.
    pub fn exec(&self) -> Exec {
        Exec { kernels: self.kernels, precision: self.precision }
    }

    /// Runs every block and returns the logits.
    ///
    /// # Shapes
    /// `[N, C, H, W] -> [N, classes]`
    pub fn forward(&mut self, x: Tensor<4>, mode: Mode) -> Tensor<2> {
        let n = self.blocks.len();
        let y = self.forward_blocks(0..n, x, mode);
        let [b, k, _, _] = y.dims();
        y.reshape([b, k])
    }

    /// Runs blocks `range` only (a pipeline stage, or a forward with a hook between blocks).
    ///
    /// # Shapes
    /// `[N, C, H, W] -> [N, C', H', W']`
    pub fn forward_blocks(&mut self, range: Range<usize>, x: Tensor<4>, mode: Mode) -> Tensor<4> {
        let exec = self.exec();
        self.blocks[range].iter_mut().fold(x, |x, b| b.forward(x, mode, exec))
    }

    /// Inference forward pass that leaves the network untouched.
    ///
    /// # Shapes
    /// `[N, C, H, W] -> [N, classes]`
    pub fn infer(&self, x: Tensor<4>) -> Tensor<2> {
        self.clone().forward(x, Mode::Eval)
    }
}

/// Size and compute of one block, for balancing pipeline stages.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockCost {
    /// Block name.
    pub name: String,
    /// Trainable scalars.
    pub params: usize,
    /// Forward multiply-adds times two, per image.
    pub flops: u64,
    /// Output shape per image `[C, H, W]` (the activation a pipeline stage boundary sends).
    pub output: [usize; 3],
}

fn conv_flops(conv: &burn::nn::conv::Conv2d, out_hw: usize) -> u64 {
    let [c_out, c_in, kh, kw] = conv.weight.dims();
    2 * (c_out * c_in * kh * kw * out_hw * out_hw) as u64
}

impl Net {
    /// The blocks `range` as a network of their own (a pipeline stage). Parameters keep their
    /// names, since block names prefix them.
    pub fn slice(&self, range: Range<usize>) -> Net {
        Net { blocks: self.blocks[range.clone()].to_vec(), block_names: self.block_names[range].to_vec(), ..*self }
    }

    /// Concatenates stages back into one network (the inverse of [`Net::slice`]), running the
    /// first stage's kernels in its format.
    pub fn join(parts: &[Net]) -> Net {
        let exec = parts.first().map_or_else(Exec::default, Net::exec);
        let mut net = Net { blocks: Vec::new(), block_names: Vec::new(), kernels: exec.kernels, precision: exec.precision };
        for p in parts {
            net.blocks.extend(p.blocks.iter().cloned());
            net.block_names.extend(p.block_names.iter().cloned());
        }
        net
    }

    /// Parameters, forward FLOPs per image and output shape of every block, for images of
    /// `input`'s shape (computed from the layer shapes, without running the network).
    pub fn block_costs(&self, input: InputShape) -> Vec<BlockCost> {
        let mut hw = input.size;
        let mut out = Vec::with_capacity(self.blocks.len());
        for (i, (block, name)) in self.blocks.iter().zip(&self.block_names).enumerate() {
            let params = self.slice(i..i + 1).num_trainable();
            let (flops, c) = match block {
                Block::Conv(u) => {
                    let f = conv_flops(&u.conv, hw);
                    if u.pool {
                        hw /= 2;
                    }
                    (f, u.conv.weight.dims()[0])
                }
                Block::Basic(b) => {
                    let stride = b.conv1.stride[0].max(1);
                    let o = hw.div_ceil(stride);
                    let mut f = conv_flops(&b.conv1, o) + conv_flops(&b.conv2, o);
                    if let Some(ds) = &b.downsample {
                        f += conv_flops(&ds.conv, o);
                    }
                    hw = o;
                    (f, b.conv2.weight.dims()[0])
                }
                Block::PoolHead(h) => {
                    let [k, d] = h.fc.weight.dims();
                    hw = 1;
                    (2 * (k * d) as u64, k)
                }
                Block::MlpHead(h) => {
                    let f = [&h.fc1, &h.fc2, &h.fc3]
                        .iter()
                        .map(|l| {
                            let [o, i] = l.weight.dims();
                            2 * (o * i) as u64
                        })
                        .sum();
                    hw = 1;
                    (f, h.fc3.weight.dims()[0])
                }
            };
            out.push(BlockCost { name: name.clone(), params, flops, output: [c, hw, hw] });
        }
        out
    }
}
