//! Layers whose state resilab owns by name: a BatchNorm whose running statistics are plain
//! parameters updated by value (no shared interior state, so `clone()` is a deep copy), and a
//! Linear layer with PyTorch's `[out, in]` weight layout.

use burn::module::{Module, Param, ParamId};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Initializer, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::module::{batch_norm, batch_norm_train, max_pool2d};
use burn::tensor::ops::{ConvOptions, MaxPoolOptions};

use crate::kernels::Kernels;
use crate::precision::Exec;

/// PyTorch's default BatchNorm momentum (weight of the new batch statistic).
pub const BN_MOMENTUM: f64 = 0.1;
/// PyTorch's default BatchNorm epsilon.
pub const BN_EPSILON: f64 = 1e-5;

/// 2-D batch normalisation with explicit running statistics.
///
/// Unlike `burn::nn::BatchNorm`, the running statistics are ordinary non-trainable parameters
/// replaced by value in [`BatchNorm2d::forward_train`], so every copy of a model owns its own
/// buffers and a `ModuleVisitor` always sees the current values.
#[derive(Module, Debug)]
pub struct BatchNorm2d {
    /// Scale (PyTorch `weight`, Burn's `gamma`), shape `[C]`.
    pub weight: Param<Tensor<1>>,
    /// Shift (PyTorch `bias`, Burn's `beta`), shape `[C]`.
    pub bias: Param<Tensor<1>>,
    /// Running mean, shape `[C]`, not trainable.
    pub running_mean: Param<Tensor<1>>,
    /// Running unbiased variance, shape `[C]`, not trainable.
    pub running_var: Param<Tensor<1>>,
}

fn buffer(t: Tensor<1>) -> Param<Tensor<1>> {
    Param::initialized(ParamId::new(), t.set_require_grad(false))
}

impl BatchNorm2d {
    /// A BatchNorm over `channels` channels: weight 1, bias 0, mean 0, variance 1.
    pub fn new(channels: usize, device: &Device) -> Self {
        Self {
            weight: Param::from_tensor(Tensor::ones([channels], device)),
            bias: Param::from_tensor(Tensor::zeros([channels], device)),
            running_mean: buffer(Tensor::zeros([channels], device)),
            running_var: buffer(Tensor::ones([channels], device)),
        }
    }

    /// Normalises with the batch statistics and updates the running statistics as PyTorch does
    /// (momentum 0.1, unbiased variance).
    ///
    /// # Shapes
    /// `[N, C, H, W] -> [N, C, H, W]`
    pub fn forward_train(&mut self, x: Tensor<4>) -> Tensor<4> {
        self.forward_train_fused(x, None, false, Exec::default())
    }

    /// [`BatchNorm2d::forward_train`], plus `residual` when given, then a ReLU when `relu`
    /// (a ResNet block's end): one fused op through resilab's kernels with
    /// [`Kernels::Resilab`], Burn's ops one by one otherwise. In a half format the output is
    /// rounded, and with a residual the normalised value is rounded before the addition too
    /// (autocast stores both), so the addition is not fused then.
    pub fn forward_train_fused(&mut self, x: Tensor<4>, residual: Option<Tensor<4>>, relu: bool, exec: Exec) -> Tensor<4> {
        let [n, _, h, w] = x.dims();
        let (output, batch_mean, batch_var) = match residual {
            Some(r) if exec.precision.half().is_some() => {
                let (y, mean, var) = self.normalize(x, None, false, exec.kernels);
                let y = exec.round(exec.round(y) + r);
                (if relu { burn::tensor::activation::relu(y) } else { y }, mean, var)
            }
            residual => {
                let (y, mean, var) = self.normalize(x, residual, relu, exec.kernels);
                (exec.round(y), mean, var)
            }
        };
        let count = (n * h * w) as f64;
        let unbias = if count > 1.0 { count / (count - 1.0) } else { 1.0 };
        let m = BN_MOMENTUM;
        let mean = self.running_mean.val().mul_scalar(1.0 - m) + batch_mean.detach().mul_scalar(m);
        let var = self.running_var.val().mul_scalar(1.0 - m) + batch_var.detach().mul_scalar(m * unbias);
        self.running_mean = Param::initialized(self.running_mean.id, mean.detach());
        self.running_var = Param::initialized(self.running_var.id, var.detach());
        output
    }

    /// Batch normalisation with the batch statistics (plus `residual`, then a ReLU when asked):
    /// `(output, batch mean, biased batch variance)`.
    fn normalize(&self, x: Tensor<4>, residual: Option<Tensor<4>>, relu: bool, kernels: Kernels) -> (Tensor<4>, Tensor<1>, Tensor<1>) {
        if kernels.resilab() {
            return crate::kernels::batch_norm_train(x, self.weight.val(), self.bias.val(), BN_EPSILON, residual, relu);
        }
        let out = batch_norm_train(x, self.weight.val(), self.bias.val(), BN_EPSILON);
        let y = match residual {
            Some(r) => out.output + r,
            None => out.output,
        };
        (if relu { burn::tensor::activation::relu(y) } else { y }, out.mean, out.variance)
    }

    /// Normalises with the running statistics.
    ///
    /// # Shapes
    /// `[N, C, H, W] -> [N, C, H, W]`
    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        batch_norm(x, self.weight.val(), self.bias.val(), self.running_mean.val(), self.running_var.val(), BN_EPSILON)
    }
}

/// Fully connected layer with PyTorch's weight layout `[out, in]`.
#[derive(Module, Debug)]
pub struct Linear {
    /// Weight, shape `[out, in]`.
    pub weight: Param<Tensor<2>>,
    /// Bias, shape `[out]`.
    pub bias: Param<Tensor<1>>,
}

impl Linear {
    /// A zero-initialised layer (values are set by [`crate::init`]).
    pub fn new(d_in: usize, d_out: usize, device: &Device) -> Self {
        Self { weight: Param::from_tensor(Tensor::zeros([d_out, d_in], device)), bias: Param::from_tensor(Tensor::zeros([d_out], device)) }
    }

    /// # Shapes
    /// `[N, in] -> [N, out]`
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.forward_then(x, false, Exec::default())
    }

    /// [`Self::forward`] followed, when `relu`, by a ReLU: one fused op through resilab's
    /// kernels with [`Kernels::Resilab`] (on the flex device), Burn's ops otherwise. In a half
    /// format the input, weight, bias and output are rounded to it.
    ///
    /// # Shapes
    /// `[N, in] -> [N, out]`
    pub fn forward_then(&self, x: Tensor<2>, relu: bool, exec: Exec) -> Tensor<2> {
        let (x, weight, bias) = (exec.round(x), exec.round(self.weight.val()), exec.round(self.bias.val()));
        exec.round(if exec.resilab() {
            crate::kernels::linear_then(x, weight, bias, relu)
        } else {
            crate::kernels::burn_linear(x, weight, bias, relu)
        })
    }
}

/// A `k x k` convolution with "same" padding for odd `k` (zero-initialised).
pub fn conv(c_in: usize, c_out: usize, k: usize, stride: usize, bias: bool, device: &Device) -> Conv2d {
    Conv2dConfig::new([c_in, c_out], [k, k])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(k / 2, k / 2, k / 2, k / 2))
        .with_bias(bias)
        .with_initializer(Initializer::Zeros)
        .init(device)
}

/// Applies `conv` to `x`, followed, when `relu`, by a ReLU: one fused op through resilab's
/// kernels with [`Kernels::Resilab`] and the tensor on the flex device, Burn's `conv2d` (and
/// `relu`) otherwise. In a half format the input, weight, bias and output are rounded to it.
pub fn conv_forward_then(conv: &Conv2d, x: Tensor<4>, relu: bool, exec: Exec) -> Tensor<4> {
    // Every convolution resilab builds has explicit padding ([`conv`]); another is Burn's
    // whole, with only its input and output rounded.
    let PaddingConfig2d::Explicit(top, left, bottom, right) = &conv.padding else {
        let y = exec.round(conv.forward(exec.round(x)));
        return if relu { burn::tensor::activation::relu(y) } else { y };
    };
    let options = ConvOptions::new_with_padding(conv.stride, [(*top, *bottom), (*left, *right)], conv.dilation, conv.groups);
    let (x, weight, bias) = (exec.round(x), exec.round(conv.weight.val()), conv.bias.as_ref().map(|b| exec.round(b.val())));
    exec.round(if exec.resilab() {
        crate::kernels::conv2d_then(x, weight, bias, options, relu)
    } else {
        let y = burn::tensor::module::conv2d(x, weight, bias, options);
        if relu { burn::tensor::activation::relu(y) } else { y }
    })
}

/// 2x2 max pooling with stride 2 (floor).
///
/// # Shapes
/// `[N, C, H, W] -> [N, C, H/2, W/2]`
pub fn pool2(x: Tensor<4>, exec: Exec) -> Tensor<4> {
    if exec.resilab() { crate::kernels::max_pool2(x) } else { max_pool2d(x, MaxPoolOptions::new([2, 2])) }
}
