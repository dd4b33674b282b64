//! resilab's own CPU kernels (`resilab-kernels`) plugged into Burn as a backend extension: on
//! the flex device, [`conv2d`] runs the forward pass and, under autodiff, both gradients as
//! GEMMs, [`batch_norm_train`] normalises with the batch statistics (and applies the ReLU
//! that follows, when asked) in one op with its own backward, and [`max_pool2`] pools 2x2
//! windows. On every other device, and for
//! shapes the kernels do not take (groups, asymmetric padding, other float types), both are
//! Burn's own operations.
//!
//! Whether a network uses them is a value it carries ([`Kernels`], set by whoever builds it;
//! the binary's `native` backend), so that `flex` stays Burn's flex bit for bit (with the GEMM
//! micro-kernels the build's `avx512` feature selects, see [`gemm_uses_avx512`]), and both
//! paths can run side by side in one process.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::ops::{ActivationOps, FloatTensorOps, ModuleOps};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, AutodiffBackend, Dispatch, DispatchDevice, Flex, backend_extension};
use burn::tensor::ops::ConvOptions;
use burn::tensor::{DType, Device, Gradients as TensorGradients, Tensor, TensorData};
use resilab_kernels::Conv2d as Shape;
use resilab_kernels::norm::{self, Norm, Stats};
use resilab_kernels::pool::{self, Pool2};
use resilab_kernels::round::{self, Half};

/// Which operations a network's layers, the gradient all-reduce and the optimizer run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kernels {
    /// Burn's own operations on every device (the `flex`, `ndarray`, `wgpu` and `tch` backends).
    #[default]
    Burn,
    /// resilab's kernels on the flex device (the `native` backend); Burn's operations on any
    /// other device and for shapes or float types the kernels do not take.
    Resilab,
}

impl Kernels {
    /// Whether resilab's kernels are chosen.
    pub fn resilab(self) -> bool {
        self == Kernels::Resilab
    }
}

/// Where networks compute and through which operations: the device, and the kernels their
/// layers run there. Chosen once, at the binary's edge, and passed down.
#[derive(Clone, Debug)]
pub struct Compute {
    /// The device (without autodiff; training makes an autodiff device from it).
    pub device: Device,
    /// The operations networks built for it run.
    pub kernels: Kernels,
}

impl Compute {
    /// Burn's own operations on `device`.
    pub fn burn(device: Device) -> Self {
        Self { device, kernels: Kernels::Burn }
    }

    /// resilab's kernels on Burn's flex CPU device (the `native` backend).
    pub fn native() -> Self {
        Self { device: Device::flex(), kernels: Kernels::Resilab }
    }
}

/// Whether the GEMMs run AVX-512 micro-kernels (the `avx512` feature on an AVX-512 CPU); the
/// platform key records it, as it changes the bits of `native` and `flex` alike.
pub use resilab_kernels::{NUMERICS, gemm_uses_avx512};

/// The convolution of `x` with `weight` (plus `bias`): resilab's kernels on the flex device
/// (with or without autodiff), Burn's `conv2d` elsewhere.
pub fn conv2d(x: Tensor<4>, weight: Tensor<4>, bias: Option<Tensor<1>>, options: ConvOptions<2>) -> Tensor<4> {
    conv2d_then(x, weight, bias, options, false)
}

/// [`conv2d`] followed, when `relu`, by a ReLU: one op, with the bias and the ReLU applied as
/// each chunk of images is computed and their gradients taken in the convolution's backward
/// step, on the flex device; Burn's `conv2d` and `relu` elsewhere.
pub fn conv2d_then(x: Tensor<4>, weight: Tensor<4>, bias: Option<Tensor<1>>, options: ConvOptions<2>, relu: bool) -> Tensor<4> {
    let device = x.device().without_autodiff();
    let bias_fits = bias.as_ref().is_none_or(|b| b.dims() == [weight.dims()[0]] && b.dtype() == DType::F32);
    if !matches!(device.as_dispatch(), DispatchDevice::Flex(_))
        || shape(&x.dims(), &weight.dims(), &options).is_none()
        || x.dtype() != DType::F32
        || !bias_fits
    {
        let y = burn::tensor::module::conv2d(x, weight, bias, options);
        return if relu { burn::tensor::activation::relu(y) } else { y };
    }
    let (x, w) = (x.into_dispatch(), weight.into_dispatch());
    Tensor::from_dispatch(match bias {
        Some(b) => <Dispatch as ConvKernels>::resilab_conv2d_bias(x, w, b.into_dispatch(), options, relu),
        None => <Dispatch as ConvKernels>::resilab_conv2d(x, w, options, relu),
    })
}

/// Training-mode batch normalisation of `x` (`[N, C, H, W]`), plus `residual` when given,
/// followed, when `relu`, by a ReLU: `(output, batch mean, biased batch variance)`. One fused
/// op on the flex device, Burn's `batch_norm_train` (then the addition and `relu`) elsewhere.
pub fn batch_norm_train(
    x: Tensor<4>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    eps: f64,
    residual: Option<Tensor<4>>,
    relu: bool,
) -> (Tensor<4>, Tensor<1>, Tensor<1>) {
    let device = x.device().without_autodiff();
    let c = x.dims()[1];
    let fits = residual.as_ref().is_none_or(|r| r.dims() == x.dims() && r.dtype() == DType::F32);
    if !matches!(device.as_dispatch(), DispatchDevice::Flex(_))
        || x.dtype() != DType::F32
        || gamma.dims() != [c]
        || beta.dims() != [c]
        || !fits
    {
        let out = burn::tensor::module::batch_norm_train(x, gamma, beta, eps);
        let y = match residual {
            Some(r) => out.output + r,
            None => out.output,
        };
        let y = if relu { burn::tensor::activation::relu(y) } else { y };
        return (y, out.mean, out.variance);
    }
    let (x, gamma, beta) = (x.into_dispatch(), gamma.into_dispatch(), beta.into_dispatch());
    let (y, mean, var) = match residual {
        Some(r) => <Dispatch as ConvKernels>::resilab_batch_norm_add_train(x, gamma, beta, eps, r.into_dispatch(), relu),
        None => <Dispatch as ConvKernels>::resilab_batch_norm_train(x, gamma, beta, eps, relu),
    };
    (Tensor::from_dispatch(y), Tensor::from_dispatch(mean), Tensor::from_dispatch(var))
}

/// 2x2 max pooling at stride 2 (floor) of `x` (`[N, C, H, W]`): resilab's kernel on the flex
/// device (its backward writes each input gradient once), Burn's `max_pool2d` elsewhere. Both
/// take a NaN in a window as its maximum.
pub fn max_pool2(x: Tensor<4>) -> Tensor<4> {
    let device = x.device().without_autodiff();
    if !matches!(device.as_dispatch(), DispatchDevice::Flex(_)) || x.dtype() != DType::F32 {
        return burn::tensor::module::max_pool2d(x, burn::tensor::ops::MaxPoolOptions::new([2, 2]));
    }
    Tensor::from_dispatch(<Dispatch as ConvKernels>::resilab_max_pool2(x.into_dispatch()))
}

/// `x` rounded to `half` and kept in float32, the gradient rounded the same way on its way back
/// under autodiff: resilab's one-pass kernel on the flex device, a cast to the format and back
/// elsewhere (the same bits on flex, where Burn casts through the `half` crate).
pub fn round_half<const D: usize>(x: Tensor<D>, half: Half) -> Tensor<D> {
    let device = x.device().without_autodiff();
    if !matches!(device.as_dispatch(), DispatchDevice::Flex(_)) || x.dtype() != DType::F32 {
        let format = match half {
            Half::Bf16 => burn::tensor::FloatDType::BF16,
            Half::F16 => burn::tensor::FloatDType::F16,
        };
        return x.cast(format).cast(burn::tensor::FloatDType::F32);
    }
    Tensor::from_dispatch(<Dispatch as ConvKernels>::resilab_round(x.into_dispatch(), half))
}

/// The fully connected layer `x W^T + b` (`x`: `[N, in]`, `weight`: `[out, in]`), then a ReLU
/// when `relu`: one op with its own backward step on the flex device (products threaded over
/// blocks of features, see `resilab_kernels::linear`), Burn's `matmul`, addition and `relu`
/// elsewhere.
pub fn linear_then(x: Tensor<2>, weight: Tensor<2>, bias: Tensor<1>, relu: bool) -> Tensor<2> {
    let device = x.device().without_autodiff();
    let [_, d_in] = x.dims();
    let [d_out, w_in] = weight.dims();
    let fits = d_in == w_in && bias.dims() == [d_out] && [x.dtype(), weight.dtype(), bias.dtype()] == [DType::F32; 3];
    if !matches!(device.as_dispatch(), DispatchDevice::Flex(_)) || !fits {
        return burn_linear(x, weight, bias, relu);
    }
    Tensor::from_dispatch(<Dispatch as ConvKernels>::resilab_linear(x.into_dispatch(), weight.into_dispatch(), bias.into_dispatch(), relu))
}

/// The fully connected layer (then a ReLU when `relu`) in Burn's ops: `matmul`, addition and
/// `relu`, as `--backend flex` and every device but flex with the kernels run it.
pub(crate) fn burn_linear(x: Tensor<2>, weight: Tensor<2>, bias: Tensor<1>, relu: bool) -> Tensor<2> {
    let y = x.matmul(weight.transpose()) + bias.unsqueeze();
    if relu { burn::tensor::activation::relu(y) } else { y }
}

/// Backpropagates `upstream`, the gradient of a loss with respect to `y`, through the graph
/// that computed `y` (a pipeline stage's backward pass from the next stage's gradient message):
/// the gradients `(y * upstream).sum().backward()` gives, without computing the product, its
/// sum or their gradients. With [`Kernels::Resilab`] and on the flex device, one op
/// whose backward step hands `upstream` to `y` as its gradient; that formulation elsewhere (as
/// in Burn's flex, where the product's gradient `upstream * 1` also quiets a signalling NaN).
pub fn backward_from<const D: usize>(y: Tensor<D>, upstream: Tensor<D>, kernels: Kernels) -> TensorGradients {
    let device = y.device().without_autodiff();
    let fits = y.dims() == upstream.dims() && [y.dtype(), upstream.dtype()] == [DType::F32; 2] && y.is_autodiff();
    if !kernels.resilab() || !matches!(device.as_dispatch(), DispatchDevice::Flex(_)) || !fits {
        return (y * upstream).sum().backward();
    }
    let anchor = <Dispatch as ConvKernels>::resilab_seed(y.into_dispatch(), upstream.autodiff().into_dispatch());
    Tensor::<1>::from_dispatch(anchor).backward()
}

/// The kernels' shape for input dims `x` and weight dims `w`, if they take it.
fn shape(x: &[usize], w: &[usize], o: &ConvOptions<2>) -> Option<Shape> {
    if o.groups != 1 || o.is_asymmetric() || x.len() != 4 || w.len() != 4 || x[1] != w[1] {
        return None;
    }
    let s = Shape {
        batch: x[0],
        c_in: x[1],
        h: x[2],
        w: x[3],
        c_out: w[0],
        kernel: [w[2], w[3]],
        stride: o.stride,
        padding: o.padding_begin(),
        dilation: o.dilation,
    };
    s.validate().ok().map(|()| s)
}

/// resilab's kernels as Burn operations (convolution, batch norm fused with its ReLU, and 2x2
/// max pooling).
#[backend_extension(Flex, Autodiff)]
pub trait ConvKernels: burn::backend::Backend {
    /// The forward pass without bias, then a ReLU when `relu`.
    fn resilab_conv2d(x: FloatTensor<Self>, weight: FloatTensor<Self>, options: ConvOptions<2>, relu: bool) -> FloatTensor<Self>;

    /// The forward pass with a bias, then a ReLU when `relu`.
    fn resilab_conv2d_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self>;

    /// Training-mode batch norm (then a ReLU when `relu`): output, batch mean, biased
    /// variance.
    fn resilab_batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
        relu: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// As [`Self::resilab_batch_norm_train`], with `residual` added before the ReLU.
    fn resilab_batch_norm_add_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
        residual: FloatTensor<Self>,
        relu: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// 2x2 max pooling at stride 2 (floor).
    fn resilab_max_pool2(x: FloatTensor<Self>) -> FloatTensor<Self>;

    /// A one-value tensor (its value 0) from which a backward pass hands `upstream` (times the
    /// anchor's own gradient) to `y` as its gradient: see [`backward_from`].
    fn resilab_seed(y: FloatTensor<Self>, upstream: FloatTensor<Self>) -> FloatTensor<Self>;

    /// A fully connected layer `x W^T + b`, then a ReLU when `relu`.
    fn resilab_linear(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: FloatTensor<Self>, relu: bool) -> FloatTensor<Self>;

    /// `x` rounded to a half format and kept in float32; under autodiff, the gradient rounded
    /// the same way on its way back (as a cast to the format and back).
    fn resilab_round(x: FloatTensor<Self>, half: Half) -> FloatTensor<Self>;
}

/// The f32 values of a flex tensor, made contiguous.
fn host(t: &FlexTensor) -> FlexTensor {
    t.to_contiguous()
}

fn dims(t: &FlexTensor) -> Vec<usize> {
    t.layout().shape().to_vec()
}

fn values(t: &FlexTensor) -> &[f32] {
    t.as_slice::<f32>().unwrap_or_else(|| t.storage::<f32>())
}

fn tensor(v: Vec<f32>, dims: [usize; 4]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(v, dims))
}

/// The forward pass on flex tensors (plus `bias`, then a ReLU when `relu`); Burn's when the
/// kernels do not take the shape.
fn forward(x: FlexTensor, w: FlexTensor, bias: Option<&FlexTensor>, o: ConvOptions<2>, relu: bool) -> FlexTensor {
    let (x, w, bias) = (host(&x), host(&w), bias.map(host));
    let burns = |x: FlexTensor, w: FlexTensor, bias: Option<FlexTensor>| {
        let y = <Flex as ModuleOps<Flex>>::conv2d(x, w, bias, o.clone());
        if relu { <Flex as ActivationOps<Flex>>::relu(y) } else { y }
    };
    let Some(s) = shape(&dims(&x), &dims(&w), &o).filter(|_| x.dtype() == DType::F32) else {
        return burns(x, w, bias);
    };
    let [oh, ow] = s.out_hw();
    match resilab_kernels::conv::forward_new(&s, values(&x), values(&w), bias.as_ref().map(values), relu) {
        Ok(y) => tensor(y, [s.batch, s.c_out, oh, ow]),
        Err(_) => burns(x, w, bias),
    }
}

/// The input, weight and bias gradients from the output gradient `g` (already through the
/// ReLU); `None` for a gradient not asked for.
fn backward(x: &FlexTensor, w: &FlexTensor, g: FlexTensor, o: &ConvOptions<2>, want: [bool; 3]) -> [Option<FlexTensor>; 3] {
    let g = host(&g);
    let (xd, wd) = (dims(x), dims(w));
    let Some(s) = shape(&xd, &wd, o) else {
        let dx = want[0].then(|| <Flex as ModuleOps<Flex>>::conv2d_x_backward(x.clone(), w.clone(), g.clone(), o.clone()));
        let dw = want[1].then(|| <Flex as ModuleOps<Flex>>::conv2d_weight_backward(x.clone(), w.clone(), g.clone(), o.clone()));
        let db = want[2].then(|| {
            let d = dims(&g);
            vector(resilab_kernels::conv::channel_sums(values(&g), d[1], d[2..].iter().product()))
        });
        return [dx, dw, db];
    };
    let (_, nw, _) = s.lens();
    // The shape was validated, so the kernels accept these buffers; Burn's gradient otherwise.
    let dx = want[0].then(|| match resilab_kernels::conv::input_grad_new(&s, values(&g), values(w)) {
        Ok(dx) => tensor(dx, [xd[0], xd[1], xd[2], xd[3]]),
        Err(_) => <Flex as ModuleOps<Flex>>::conv2d_x_backward(x.clone(), w.clone(), g.clone(), o.clone()),
    });
    let dw = want[1].then(|| {
        let mut dw = vec![0.0; nw];
        match resilab_kernels::conv::weight_grad(&s, values(x), values(&g), &mut dw, None) {
            Ok(()) => tensor(dw, [wd[0], wd[1], wd[2], wd[3]]),
            Err(_) => <Flex as ModuleOps<Flex>>::conv2d_weight_backward(x.clone(), w.clone(), g.clone(), o.clone()),
        }
    });
    let db = want[2].then(|| vector(resilab_kernels::conv::channel_sums(values(&g), s.c_out, s.p())));
    [dx, dw, db]
}

/// The kernels' view of a `[N, C, H, W]` tensor.
fn norm_shape(dims: &[usize]) -> Norm {
    Norm { batch: dims[0], channels: dims[1], plane: dims[2..].iter().product() }
}

/// The fused forward pass on flex tensors: the output and the statistics.
fn bn_forward(
    x: &FlexTensor,
    gamma: &FlexTensor,
    beta: &FlexTensor,
    eps: f64,
    residual: Option<&FlexTensor>,
    relu: bool,
) -> (FlexTensor, Stats) {
    let d = dims(x);
    let residual = residual.map(host);
    // The public wrapper checked the shapes (rank 4, gamma and beta of C values, a residual
    // of x's shape, f32).
    let (y, stats) = norm::forward_new(&norm_shape(&d), values(x), values(gamma), values(beta), eps, relu, residual.as_ref().map(values))
        .unwrap_or_else(|e| panic!("resilab batch norm called with shapes its wrapper rejects: {e}"));
    (tensor(y, [d[0], d[1], d[2], d[3]]), stats)
}

/// The kernel's view of a `[N, C, H, W]` tensor.
fn pool_shape(d: &[usize]) -> Pool2 {
    Pool2 { batch: d[0], channels: d[1], h: d[2], w: d[3] }
}

/// The pooled output and each window's position of its maximum.
fn pool_forward(x: &FlexTensor) -> (FlexTensor, Vec<u8>) {
    let s = pool_shape(&dims(x));
    let [oh, ow] = s.out_hw();
    let n = s.batch * s.channels * oh * ow;
    let (mut y, mut arg) = (vec![0.0; n], vec![0u8; n]);
    // The buffers are sized from the shape, which is all the kernel checks.
    pool::forward(&s, values(x), &mut y, &mut arg).unwrap_or_else(|e| panic!("resilab max pool: {e}"));
    (tensor(y, [s.batch, s.channels, oh, ow]), arg)
}

/// The kernel's view of `[N, in]` input and `[out, in]` weight dims.
fn linear_shape(x: &[usize], w: &[usize]) -> resilab_kernels::linear::Linear {
    resilab_kernels::linear::Linear { batch: x[0], d_in: x[1], d_out: w[0] }
}

/// The fully connected layer's output on contiguous flex tensors (the public wrapper checked
/// the shapes and the float type).
fn linear_forward(x: &FlexTensor, w: &FlexTensor, b: &FlexTensor, relu: bool) -> FlexTensor {
    let s = linear_shape(&dims(x), &dims(w));
    let y = resilab_kernels::linear::forward_new(&s, values(x), values(w), Some(values(b)), relu)
        .unwrap_or_else(|e| panic!("resilab linear called with shapes its wrapper rejects: {e}"));
    FlexTensor::from_data(TensorData::new(y, [s.batch, s.d_out]))
}

fn vector(v: Vec<f32>) -> FlexTensor {
    let n = v.len();
    FlexTensor::from_data(TensorData::new(v, [n]))
}

impl ConvKernels for Flex {
    fn resilab_batch_norm_train(
        x: FlexTensor,
        gamma: FlexTensor,
        beta: FlexTensor,
        eps: f64,
        relu: bool,
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        let (x, gamma, beta) = (host(&x), host(&gamma), host(&beta));
        let (y, stats) = bn_forward(&x, &gamma, &beta, eps, None, relu);
        (y, vector(stats.mean), vector(stats.var))
    }

    fn resilab_batch_norm_add_train(
        x: FlexTensor,
        gamma: FlexTensor,
        beta: FlexTensor,
        eps: f64,
        residual: FlexTensor,
        relu: bool,
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        let (x, gamma, beta) = (host(&x), host(&gamma), host(&beta));
        let (y, stats) = bn_forward(&x, &gamma, &beta, eps, Some(&residual), relu);
        (y, vector(stats.mean), vector(stats.var))
    }

    fn resilab_conv2d(x: FlexTensor, weight: FlexTensor, options: ConvOptions<2>, relu: bool) -> FlexTensor {
        forward(x, weight, None, options, relu)
    }

    fn resilab_conv2d_bias(x: FlexTensor, weight: FlexTensor, bias: FlexTensor, options: ConvOptions<2>, relu: bool) -> FlexTensor {
        forward(x, weight, Some(&bias), options, relu)
    }

    fn resilab_max_pool2(x: FlexTensor) -> FlexTensor {
        pool_forward(&host(&x)).0
    }

    fn resilab_linear(x: FlexTensor, weight: FlexTensor, bias: FlexTensor, relu: bool) -> FlexTensor {
        linear_forward(&host(&x), &host(&weight), &host(&bias), relu)
    }

    fn resilab_seed(_: FlexTensor, _: FlexTensor) -> FlexTensor {
        vector(vec![0.0])
    }

    fn resilab_round(x: FlexTensor, half: Half) -> FlexTensor {
        round_flex(&x, half)
    }
}

/// `x`'s values rounded to `half`, in a new tensor of its shape.
fn round_flex(x: &FlexTensor, half: Half) -> FlexTensor {
    let x = host(x);
    FlexTensor::from_data(TensorData::new(round::round_new(values(&x), half), dims(&x)))
}

impl<C: CheckpointStrategy> ConvKernels for Autodiff<Flex, C> {
    fn resilab_conv2d(x: FloatTensor<Self>, weight: FloatTensor<Self>, options: ConvOptions<2>, relu: bool) -> FloatTensor<Self> {
        autodiff_conv2d::<C>(x, weight, None, options, relu)
    }

    fn resilab_conv2d_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self> {
        autodiff_conv2d::<C>(x, weight, Some(bias), options, relu)
    }

    fn resilab_batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
        relu: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        autodiff_batch_norm::<C>(x, gamma, beta, eps, None, relu)
    }

    fn resilab_batch_norm_add_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
        residual: FloatTensor<Self>,
        relu: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        autodiff_batch_norm::<C>(x, gamma, beta, eps, Some(residual), relu)
    }

    fn resilab_linear(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: FloatTensor<Self>, relu: bool) -> FloatTensor<Self> {
        autodiff_linear::<C>(x, weight, bias, relu)
    }

    fn resilab_seed(y: FloatTensor<Self>, upstream: FloatTensor<Self>) -> FloatTensor<Self> {
        /// The anchor's backward step: `upstream`, scaled by the anchor's gradient unless that
        /// is exactly 1 (a backward pass from the anchor itself), becomes `y`'s gradient.
        #[derive(Debug)]
        struct SeedBackward;

        impl Backward<Flex, 1> for SeedBackward {
            type State = FlexTensor;

            fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let [node] = ops.parents;
                let g = host(&grads.consume::<Flex>(&ops.node));
                let Some(node) = node else { return };
                let upstream = ops.state;
                let scale = values(&g).first().copied().unwrap_or(1.0);
                let grad = if scale == 1.0 { upstream } else { <Flex as FloatTensorOps<Flex>>::float_mul_scalar(upstream, scale.into()) };
                grads.register::<Flex>(node.id, grad);
            }
        }

        let upstream = host(upstream.primitive());
        let anchor = vector(vec![0.0]);
        match SeedBackward.prepare::<C>([y.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(upstream, anchor),
            OpsKind::UnTracked(prep) => prep.finish(anchor),
        }
    }

    fn resilab_round(x: FloatTensor<Self>, half: Half) -> FloatTensor<Self> {
        /// The rounding's backward step: the gradient rounded to the same format.
        #[derive(Debug)]
        struct RoundBackward;

        impl Backward<Flex, 1> for RoundBackward {
            type State = Half;

            fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let [node] = ops.parents;
                let g = grads.consume::<Flex>(&ops.node);
                let Some(node) = node else { return };
                grads.register::<Flex>(node.id, round_flex(&g, ops.state));
            }
        }

        let y = round_flex(x.primitive(), half);
        match RoundBackward.prepare::<C>([x.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(half, y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn resilab_max_pool2(x: FloatTensor<Self>) -> FloatTensor<Self> {
        /// The pool's backward step: each input gradient written once.
        #[derive(Debug)]
        struct PoolBackward;

        impl Backward<Flex, 1> for PoolBackward {
            type State = (Vec<u8>, Vec<usize>);

            fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let [node] = ops.parents;
                let dy = host(&grads.consume::<Flex>(&ops.node));
                let (arg, d) = ops.state;
                let Some(node) = node else { return };
                let dx = pool::backward_new(&pool_shape(&d), values(&dy), &arg)
                    .unwrap_or_else(|e| panic!("resilab max pool backward on the shape its forward pass took: {e}"));
                grads.register::<Flex>(node.id, tensor(dx, [d[0], d[1], d[2], d[3]]));
            }
        }

        let xp = host(x.primitive());
        let (y, arg) = pool_forward(&xp);
        match PoolBackward.prepare::<C>([x.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((arg, dims(&xp)), y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }
}

/// The fully connected layer (then ReLU) under autodiff, with its backward step.
fn autodiff_linear<C: CheckpointStrategy>(x: AdTensor<C>, weight: AdTensor<C>, bias: AdTensor<C>, relu: bool) -> AdTensor<C> {
    /// The backward step: the output gradient through the ReLU (when there is one), then the
    /// input, weight and bias gradients through the kernels.
    #[derive(Debug)]
    struct LinearBackward;

    impl Backward<Flex, 3> for LinearBackward {
        /// Input, weight, and the output when a ReLU follows.
        type State = (FlexTensor, FlexTensor, Option<FlexTensor>);

        fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
            let [node_x, node_w, node_b] = ops.parents;
            let g = host(&grads.consume::<Flex>(&ops.node));
            let (x, w, y) = ops.state;
            let through_relu = y.map(|y| resilab_kernels::act::relu_grad_new(values(&y), values(&g)));
            let g = through_relu.as_deref().unwrap_or_else(|| values(&g));
            let s = linear_shape(&dims(&x), &dims(&w));
            let fail = |e: resilab_kernels::Error| panic!("resilab linear backward on the shapes its forward pass took: {e}");
            if let Some(node) = node_x {
                let dx = resilab_kernels::linear::input_grad_new(&s, g, values(&w)).unwrap_or_else(fail);
                grads.register::<Flex>(node.id, FlexTensor::from_data(TensorData::new(dx, [s.batch, s.d_in])));
            }
            if let Some(node) = node_w {
                let dw = resilab_kernels::linear::weight_grad_new(&s, values(&x), g).unwrap_or_else(fail);
                grads.register::<Flex>(node.id, FlexTensor::from_data(TensorData::new(dw, [s.d_out, s.d_in])));
            }
            if let Some(node) = node_b {
                grads.register::<Flex>(node.id, vector(resilab_kernels::linear::bias_grad(&s, g).unwrap_or_else(fail)));
            }
        }
    }

    let (xp, wp, bp) = (host(x.primitive()), host(weight.primitive()), host(bias.primitive()));
    let y = linear_forward(&xp, &wp, &bp, relu);
    match LinearBackward.prepare::<C>([x.node(), weight.node(), bias.node()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((xp, wp, relu.then(|| y.clone())), y),
        OpsKind::UnTracked(prep) => prep.finish(y),
    }
}

/// A flex tensor under autodiff with checkpoint strategy `C`.
type AdTensor<C> = FloatTensor<Autodiff<Flex, C>>;

/// The fused batch norm (plus residual, then ReLU) under autodiff, with its backward step.
fn autodiff_batch_norm<C: CheckpointStrategy>(
    x: AdTensor<C>,
    gamma: AdTensor<C>,
    beta: AdTensor<C>,
    eps: f64,
    residual: Option<AdTensor<C>>,
    relu: bool,
) -> (AdTensor<C>, AdTensor<C>, AdTensor<C>) {
    /// The fused op's backward step: input, scale and shift gradients in two passes, and
    /// the residual's (its fourth parent, when it has one) in a third.
    #[derive(Debug)]
    struct NormBackward;

    impl<const N: usize> Backward<Flex, N> for NormBackward {
        type State = (FlexTensor, FlexTensor, FlexTensor, Stats, bool);

        fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
            let mut parents = ops.parents.into_iter();
            let [node_x, node_gamma, node_beta, node_r] = std::array::from_fn(|_| parents.next().flatten());
            let dy = host(&grads.consume::<Flex>(&ops.node));
            let (x, y, gamma, stats, relu) = ops.state;
            let d = dims(&x);
            let (s, c) = (norm_shape(&d), d[1]);
            if let Some(node) = node_r {
                let dr = if relu {
                    norm::residual_grad_new(&s, values(&y), values(&dy)).unwrap_or_else(|e| panic!("resilab batch norm backward: {e}"))
                } else {
                    values(&dy).to_vec()
                };
                grads.register::<Flex>(node.id, tensor(dr, [d[0], d[1], d[2], d[3]]));
            }
            let (mut dgamma, mut dbeta) = (vec![0.0; c], vec![0.0; c]);
            let dx = norm::backward_new(&s, values(&x), values(&y), values(&dy), values(&gamma), &stats, relu, &mut dgamma, &mut dbeta)
                .unwrap_or_else(|e| panic!("resilab batch norm backward on shapes its forward pass took: {e}"));
            if let Some(node) = node_x {
                grads.register::<Flex>(node.id, tensor(dx, [d[0], d[1], d[2], d[3]]));
            }
            if let Some(node) = node_gamma {
                grads.register::<Flex>(node.id, vector(dgamma));
            }
            if let Some(node) = node_beta {
                grads.register::<Flex>(node.id, vector(dbeta));
            }
        }
    }

    let (xp, gp, bp) = (host(x.primitive()), host(gamma.primitive()), host(beta.primitive()));
    let (y, stats) = bn_forward(&xp, &gp, &bp, eps, residual.as_ref().map(|r| r.primitive()), relu);
    let (mean, var) = (vector(stats.mean.clone()), vector(stats.var.clone()));
    let state = |y: &FlexTensor| (xp.clone(), y.clone(), gp.clone(), stats.clone(), relu);
    let out = match residual {
        Some(r) => match NormBackward.prepare::<C>([x.node(), gamma.node(), beta.node(), r.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(state(&y), y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        },
        None => match NormBackward.prepare::<C>([x.node(), gamma.node(), beta.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(state(&y), y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        },
    };
    (out, <Autodiff<Flex, C> as AutodiffBackend>::from_inner(mean), <Autodiff<Flex, C> as AutodiffBackend>::from_inner(var))
}

/// The convolution (plus bias, then ReLU) under autodiff, with its backward step.
fn autodiff_conv2d<C: CheckpointStrategy>(
    x: AdTensor<C>,
    weight: AdTensor<C>,
    bias: Option<AdTensor<C>>,
    options: ConvOptions<2>,
    relu: bool,
) -> AdTensor<C> {
    /// The backward step: the output gradient through the ReLU (when there is one), then the
    /// input, weight and bias (its third parent, when it has one) gradients through the kernels.
    #[derive(Debug)]
    struct ConvBackward;

    impl<const N: usize> Backward<Flex, N> for ConvBackward {
        /// Input, weight, the output when a ReLU follows, and the options.
        type State = (FlexTensor, FlexTensor, Option<FlexTensor>, ConvOptions<2>);

        fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
            let mut parents = ops.parents.into_iter();
            let [node_x, node_w, node_b] = std::array::from_fn(|_| parents.next().flatten());
            let g = grads.consume::<Flex>(&ops.node);
            let (x, w, y, o) = ops.state;
            let g = match y {
                Some(y) => {
                    let (g, d) = (host(&g), dims(&y));
                    tensor(resilab_kernels::act::relu_grad_new(values(&y), values(&g)), [d[0], d[1], d[2], d[3]])
                }
                None => g,
            };
            let grads_out = backward(&x, &w, g, &o, [node_x.is_some(), node_w.is_some(), node_b.is_some()]);
            for (node, grad) in [node_x, node_w, node_b].into_iter().zip(grads_out) {
                if let (Some(node), Some(grad)) = (node, grad) {
                    grads.register::<Flex>(node.id, grad);
                }
            }
        }
    }

    let (xp, wp) = (host(x.primitive()), host(weight.primitive()));
    let y = forward(xp.clone(), wp.clone(), bias.as_ref().map(|b| b.primitive()), options.clone(), relu);
    let state = (xp, wp, relu.then(|| y.clone()), options);
    match bias {
        Some(b) => match ConvBackward.prepare::<C>([x.node(), weight.node(), b.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(state, y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        },
        None => match ConvBackward.prepare::<C>([x.node(), weight.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(state, y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        },
    }
}
