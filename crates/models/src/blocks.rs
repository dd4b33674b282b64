//! The blocks a network is made of. Each maps `[N, C, H, W]` to `[N, C', H', W']`; heads
//! return logits as `[N, classes, 1, 1]` so that every block boundary carries a rank-4 tensor
//! (pipeline stages cut at block boundaries).

use burn::module::Module;
use burn::nn::conv::Conv2d;
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::module::adaptive_avg_pool2d;

use crate::layers::{BatchNorm2d, Linear, conv, conv_forward_then, pool2};
use crate::precision::Exec;

/// Forward mode: training (batch statistics, running statistics updated) or inference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Batch statistics; BatchNorm running statistics are updated.
    Train,
    /// Running statistics; nothing is updated.
    Eval,
}

/// BatchNorm, then a ReLU when `relu` (fused in training mode with resilab's kernels), its
/// output rounded to the format.
fn bn_then(bn: &mut BatchNorm2d, x: Tensor<4>, mode: Mode, relu_after: bool, k: Exec) -> Tensor<4> {
    match mode {
        Mode::Train => bn.forward_train_fused(x, None, relu_after, k),
        Mode::Eval if relu_after => relu(k.round(bn.forward(x))),
        Mode::Eval => k.round(bn.forward(x)),
    }
}

/// BatchNorm, plus the shortcut, then a ReLU: a residual block's end (one fused op in training
/// mode with resilab's kernels in fp32). In a half format both the normalised value and the
/// sum are rounded to it.
fn bn_add_relu(bn: &mut BatchNorm2d, x: Tensor<4>, shortcut: Tensor<4>, mode: Mode, k: Exec) -> Tensor<4> {
    match mode {
        Mode::Train => bn.forward_train_fused(x, Some(shortcut), true, k),
        Mode::Eval => relu(k.round(k.round(bn.forward(x)) + shortcut)),
    }
}

/// Convolution, optional BatchNorm, ReLU and optional 2x2 max pooling (ResNet stem, VGG and
/// AlexNet feature layers).
#[derive(Module, Debug)]
pub struct ConvUnit {
    /// The convolution.
    pub conv: Conv2d,
    /// BatchNorm after the convolution, if any.
    pub bn: Option<BatchNorm2d>,
    /// Whether a 2x2 max pool follows the ReLU.
    pub pool: bool,
}

impl ConvUnit {
    /// Builds the unit (zero-initialised parameters). `bias` adds a convolution bias (VGG and
    /// AlexNet keep it even with BatchNorm, as torchvision does; the ResNet stem has none).
    pub fn new(c_in: usize, c_out: usize, k: usize, bias: bool, batch_norm: bool, pool: bool, device: &Device) -> Self {
        Self { conv: conv(c_in, c_out, k, 1, bias, device), bn: batch_norm.then(|| BatchNorm2d::new(c_out, device)), pool }
    }

    fn forward(&mut self, x: Tensor<4>, mode: Mode, k: Exec) -> Tensor<4> {
        let x = match self.bn.as_mut() {
            Some(bn) => bn_then(bn, conv_forward_then(&self.conv, x, false, k), mode, true, k),
            None => conv_forward_then(&self.conv, x, true, k),
        };
        if self.pool { pool2(x, k) } else { x }
    }
}

/// The 1x1 convolution and BatchNorm of a residual shortcut that changes shape.
#[derive(Module, Debug)]
pub struct Downsample {
    /// 1x1 strided convolution.
    pub conv: Conv2d,
    /// BatchNorm after it.
    pub bn: BatchNorm2d,
}

/// ResNet BasicBlock: two 3x3 convolutions with BatchNorm and an identity or projection
/// shortcut.
#[derive(Module, Debug)]
pub struct BasicBlock {
    /// First 3x3 convolution (carries the stride).
    pub conv1: Conv2d,
    /// BatchNorm after `conv1`.
    pub bn1: BatchNorm2d,
    /// Second 3x3 convolution.
    pub conv2: Conv2d,
    /// BatchNorm after `conv2`.
    pub bn2: BatchNorm2d,
    /// Projection shortcut when the shape changes.
    pub downsample: Option<Downsample>,
}

impl BasicBlock {
    /// Builds a block from `c_in` to `c_out` channels with the given stride.
    pub fn new(c_in: usize, c_out: usize, stride: usize, device: &Device) -> Self {
        let downsample = (stride != 1 || c_in != c_out)
            .then(|| Downsample { conv: conv(c_in, c_out, 1, stride, false, device), bn: BatchNorm2d::new(c_out, device) });
        Self {
            conv1: conv(c_in, c_out, 3, stride, false, device),
            bn1: BatchNorm2d::new(c_out, device),
            conv2: conv(c_out, c_out, 3, 1, false, device),
            bn2: BatchNorm2d::new(c_out, device),
            downsample,
        }
    }

    fn forward(&mut self, x: Tensor<4>, mode: Mode, k: Exec) -> Tensor<4> {
        let shortcut = match self.downsample.as_mut() {
            Some(ds) => bn_then(&mut ds.bn, conv_forward_then(&ds.conv, x.clone(), false, k), mode, false, k),
            None => x.clone(),
        };
        let y = bn_then(&mut self.bn1, conv_forward_then(&self.conv1, x, false, k), mode, true, k);
        bn_add_relu(&mut self.bn2, conv_forward_then(&self.conv2, y, false, k), shortcut, mode, k)
    }
}

/// Global average pooling followed by one linear layer (ResNet and VGG heads).
#[derive(Module, Debug)]
pub struct PoolHead {
    /// The classifier layer.
    pub fc: Linear,
}

impl PoolHead {
    fn forward(&self, x: Tensor<4>, k: Exec) -> Tensor<4> {
        let [n, c, _, _] = x.dims();
        let x = k.round(adaptive_avg_pool2d(x, [1, 1])).reshape([n, c]);
        let logits = self.fc.forward_then(x, false, k);
        let k = logits.dims()[1];
        logits.reshape([n, k, 1, 1])
    }
}

/// Flatten followed by three linear layers with ReLU between them (AlexNet head).
#[derive(Module, Debug)]
pub struct MlpHead {
    /// First hidden layer.
    pub fc1: Linear,
    /// Second hidden layer.
    pub fc2: Linear,
    /// Output layer.
    pub fc3: Linear,
}

impl MlpHead {
    fn forward(&self, x: Tensor<4>, k: Exec) -> Tensor<4> {
        let [n, c, h, w] = x.dims();
        let x = x.reshape([n, c * h * w]);
        let x = self.fc1.forward_then(x, true, k);
        let x = self.fc2.forward_then(x, true, k);
        let logits = self.fc3.forward_then(x, false, k);
        let k = logits.dims()[1];
        logits.reshape([n, k, 1, 1])
    }
}

/// One named block of a network.
// A network holds a few dozen blocks at most; boxing the residual variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Block {
    /// Convolution unit.
    Conv(ConvUnit),
    /// Residual basic block.
    Basic(BasicBlock),
    /// Pool + linear head.
    PoolHead(PoolHead),
    /// Flatten + MLP head.
    MlpHead(MlpHead),
}

impl Block {
    /// Runs the block, through `kernels` and in its format.
    ///
    /// # Shapes
    /// `[N, C, H, W] -> [N, C', H', W']`; heads return `[N, classes, 1, 1]`.
    pub fn forward(&mut self, x: Tensor<4>, mode: Mode, kernels: Exec) -> Tensor<4> {
        match self {
            Block::Conv(b) => b.forward(x, mode, kernels),
            Block::Basic(b) => b.forward(x, mode, kernels),
            Block::PoolHead(b) => b.forward(x, kernels),
            Block::MlpHead(b) => b.forward(x, kernels),
        }
    }
}

impl Block {
    /// The block's layers (paths below the block's name) in the order a backward pass reaches
    /// them, as PyTorch's autograd does for the same module: the layers last to first, and in
    /// a residual block the main path (`bn2` to `conv1`) before the projection shortcut.
    pub fn backward_layers(&self) -> &'static [&'static str] {
        match self {
            Block::Conv(_) => &["bn", "conv"],
            Block::Basic(_) => &["bn2", "conv2", "bn1", "conv1", "downsample.bn", "downsample.conv"],
            Block::PoolHead(_) => &["fc"],
            Block::MlpHead(_) => &["fc3", "fc2", "fc1"],
        }
    }
}
