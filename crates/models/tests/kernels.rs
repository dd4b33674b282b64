//! resilab's kernels against Burn's flex reference: convolution forward values and, through
//! autodiff, the input, weight and bias gradients on odd shapes (batch 1, non-square inputs
//! and kernels, padding, stride 2, dilation, channel counts no SIMD width divides), alone and
//! fused with its bias and ReLU; the fused
//! BatchNorm (+ residual) + ReLU, NaN included; the fully connected layer (+ ReLU) with its
//! gradients; and 2x2 max pooling, bit for bit.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Tensor, TensorData};
use resilab_models::kernels;

fn values(n: usize, salt: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + salt) * 0.618_034).fract() - 0.5).collect()
}

fn host<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// Largest difference relative to the reference's largest magnitude.
fn rel(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
    got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max) / scale
}

/// `(batch, c_in, [h, w], c_out, [kh, kw], stride, padding, dilation)`.
type Case = (usize, usize, [usize; 2], usize, [usize; 2], [usize; 2], [usize; 2], [usize; 2]);

const CASES: [Case; 7] = [
    (1, 3, [9, 7], 5, [3, 3], [1, 1], [1, 1], [1, 1]),
    (3, 5, [12, 10], 7, [3, 2], [2, 2], [1, 0], [1, 1]),
    (2, 17, [8, 8], 9, [5, 5], [1, 1], [2, 2], [1, 1]),
    (4, 6, [7, 11], 3, [3, 3], [1, 2], [2, 1], [2, 2]),
    (5, 9, [6, 6], 11, [1, 1], [1, 1], [0, 0], [1, 1]),
    (3, 6, [9, 9], 10, [1, 1], [2, 2], [0, 0], [1, 1]),
    (2, 3, [32, 32], 16, [3, 3], [2, 2], [1, 1], [1, 1]),
];

/// Forward output and the three gradients of `sum(conv(x, w, b) * r)` (with a ReLU after the
/// convolution when `relu`) for random `r`, by the kernels (`ours`) or Burn's ops.
fn run(dev: &Device, case: Case, relu: bool, ours: bool) -> [Vec<f32>; 4] {
    let (n, ci, [h, w], ..) = case;
    run_on(dev, case, &values(n * ci * h * w, 0.1), relu, ours)
}

fn run_on(dev: &Device, case: Case, xv: &[f32], relu: bool, ours: bool) -> [Vec<f32>; 4] {
    let (n, ci, [h, w], co, k, stride, padding, dilation) = case;
    let x = Tensor::<4>::from_data(TensorData::new(xv.to_vec(), [n, ci, h, w]), dev).require_grad();
    let wt = Tensor::<4>::from_data(TensorData::new(values(co * ci * k[0] * k[1], 0.7), [co, ci, k[0], k[1]]), dev).require_grad();
    let b = Tensor::<1>::from_data(TensorData::new(values(co, 0.3), [co]), dev).require_grad();
    let opts = ConvOptions::new(stride, padding, dilation, 1);
    let y = if ours {
        kernels::conv2d_then(x.clone(), wt.clone(), Some(b.clone()), opts, relu)
    } else {
        let y = conv2d(x.clone(), wt.clone(), Some(b.clone()), opts);
        if relu { burn::tensor::activation::relu(y) } else { y }
    };
    let r = Tensor::<4>::from_data(TensorData::new(values(y.shape().num_elements(), 0.9), y.dims()), dev);
    let grads = (y.clone() * r).sum().backward();
    let g = |t: Option<Tensor<4>>| host(t.unwrap());
    [host(y), g(x.grad(&grads)), g(wt.grad(&grads)), host(b.grad(&grads).unwrap())]
}

#[test]
fn kernels_match_burns_convolution_and_its_gradients_on_odd_shapes() {
    let dev = Device::flex().autodiff();
    for case in CASES {
        for relu in [false, true] {
            let (ours, burn) = (run(&dev, case, relu, true), run(&dev, case, relu, false));
            for (what, (a, b)) in ["forward", "input gradient", "weight gradient", "bias gradient"].iter().zip(ours.iter().zip(&burn)) {
                let e = rel(a, b);
                assert!(e < 1e-5, "{what} of {case:?} (relu {relu}): relative difference {e}");
            }
        }
    }
}

/// A NaN input reaches the fused convolution + ReLU's output and gradients where it reaches
/// Burn's convolution and `relu`.
#[test]
fn a_nan_passes_the_fused_convolution_and_relu_as_it_passes_burns() {
    let dev = Device::flex().autodiff();
    let case = CASES[0];
    let (n, ci, [h, w], ..) = case;
    let mut xv = values(n * ci * h * w, 0.1);
    xv[20] = f32::NAN;
    let (ours, burn) = (run_on(&dev, case, &xv, true, true), run_on(&dev, case, &xv, true, false));
    for (i, (a, b)) in ours.iter().zip(&burn).enumerate() {
        let nans = |t: &[f32]| t.iter().map(|x| x.is_nan()).collect::<Vec<_>>();
        assert_eq!(nans(a), nans(b), "value {i}");
    }
    assert!(ours[0].iter().any(|v| v.is_nan()));
}

#[test]
fn without_autodiff_the_forward_pass_matches_too() {
    let dev = Device::flex();
    let (n, ci, h, co) = (2, 5, 10, 4);
    let x = Tensor::<4>::from_data(TensorData::new(values(n * ci * h * h, 0.2), [n, ci, h, h]), &dev);
    let w = Tensor::<4>::from_data(TensorData::new(values(co * ci * 9, 0.4), [co, ci, 3, 3]), &dev);
    let opts = ConvOptions::new([2, 2], [1, 1], [1, 1], 1);
    let e = rel(&host(kernels::conv2d(x.clone(), w.clone(), None, opts.clone())), &host(conv2d(x, w, None, opts)));
    assert!(e < 1e-5, "{e}");
}

#[test]
fn grouped_convolutions_fall_back_to_burn() {
    let dev = Device::flex();
    let x = Tensor::<4>::from_data(TensorData::new(values(2 * 4 * 6 * 6, 0.2), [2, 4, 6, 6]), &dev);
    let w = Tensor::<4>::from_data(TensorData::new(values(4 * 2 * 9, 0.4), [4, 2, 3, 3]), &dev);
    let opts = ConvOptions::new([1, 1], [1, 1], [1, 1], 2);
    assert_eq!(host(kernels::conv2d(x.clone(), w.clone(), None, opts.clone())), host(conv2d(x, w, None, opts)));
}

/// The fused batch norm (+ residual, + ReLU) against Burn's `batch_norm_train`, the addition
/// and `relu`: output, batch mean and variance, and the input, scale, shift and residual
/// gradients, with and without the residual and the ReLU.
#[test]
fn fused_batch_norm_matches_burns_batch_norm_add_and_relu_with_gradients() {
    let dev = Device::flex().autodiff();
    for (n, c, h, w) in [(1, 3, 5, 7), (4, 17, 6, 6), (3, 8, 1, 1), (2, 5, 9, 4)] {
        for (relu, residual) in [(false, false), (true, false), (true, true), (false, true)] {
            let v = values(n * c * h * w, 0.1);
            let (ours, burn) =
                (fused_bn(&dev, [n, c, h, w], &v, relu, residual, true), fused_bn(&dev, [n, c, h, w], &v, relu, residual, false));
            let names = ["output", "mean", "variance", "input gradient", "scale gradient", "shift gradient", "residual gradient"];
            for (what, (a, b)) in names.iter().zip(ours.iter().zip(&burn)) {
                let e = rel(a, b);
                // Burn sums in f32, the kernels in f64: a few ulps of the largest value apart.
                assert!(e < 1e-5, "{what} of {:?} (relu {relu}, residual {residual}): relative difference {e}", (n, c, h, w));
            }
        }
    }
}

/// Output, mean, variance and the gradients of `sum(y * r)` of the batch norm (+ residual, +
/// ReLU), by the kernels (`ours`) or Burn's ops; the residual's gradient is empty without one.
fn fused_bn(dev: &Device, dims: [usize; 4], x: &[f32], relu: bool, residual: bool, ours: bool) -> [Vec<f32>; 7] {
    use burn::tensor::activation::relu as burn_relu;
    use burn::tensor::module::batch_norm_train;
    let [n, c, h, w] = dims;
    let x = Tensor::<4>::from_data(TensorData::new(x.to_vec(), dims), dev).require_grad();
    let g = Tensor::<1>::from_data(TensorData::new(values(c, 0.4).iter().map(|v| v + 1.0).collect::<Vec<_>>(), [c]), dev).require_grad();
    let b = Tensor::<1>::from_data(TensorData::new(values(c, 0.8), [c]), dev).require_grad();
    let res = residual.then(|| Tensor::<4>::from_data(TensorData::new(values(n * c * h * w, 0.6), dims), dev).require_grad());
    let (y, mean, var) = if ours {
        kernels::batch_norm_train(x.clone(), g.clone(), b.clone(), 1e-5, res.clone(), relu)
    } else {
        let o = batch_norm_train(x.clone(), g.clone(), b.clone(), 1e-5);
        let y = match res.clone() {
            Some(r) => o.output + r,
            None => o.output,
        };
        (if relu { burn_relu(y) } else { y }, o.mean, o.variance)
    };
    let r = Tensor::<4>::from_data(TensorData::new(values(n * c * h * w, 0.9), dims), dev);
    let grads = (y.clone() * r).sum().backward();
    let dres = res.map(|t| host(t.grad(&grads).unwrap())).unwrap_or_default();
    [host(y), host(mean), host(var), host(x.grad(&grads).unwrap()), host(g.grad(&grads).unwrap()), host(b.grad(&grads).unwrap()), dres]
}

/// A NaN in the input (a flipped exponent) reaches the fused op's output and gradients where it
/// reaches Burn's: the ReLU passes NaN, it does not clamp it to 0.
#[test]
fn a_nan_passes_the_fused_relu_as_it_passes_burns() {
    let dev = Device::flex().autodiff();
    let dims = [2, 3, 4, 4];
    let mut v = values(96, 0.2);
    v[17] = f32::NAN; // image 0, channel 1
    for residual in [false, true] {
        let (ours, burn) = (fused_bn(&dev, dims, &v, true, residual, true), fused_bn(&dev, dims, &v, true, residual, false));
        for (i, (a, b)) in ours.iter().zip(&burn).enumerate() {
            let nans = |t: &[f32]| t.iter().map(|x| x.is_nan()).collect::<Vec<_>>();
            assert_eq!(nans(a), nans(b), "value {i} (residual {residual})");
        }
        assert!(ours[0].iter().filter(|x| x.is_nan()).count() == 32, "channel 1 of both images is NaN");
    }
}

#[test]
fn max_pool_matches_burns_bit_for_bit_with_nans_and_odd_sizes() {
    let dev = Device::flex().autodiff();
    for dims in [[2, 3, 7, 9], [1, 4, 8, 6], [3, 2, 5, 5]] {
        let n = dims.iter().product();
        let mut v = values(n, 0.4);
        // A tie, a NaN, and two NaNs in one window.
        (v[0], v[1]) = (0.25, 0.25);
        v[n / 3] = f32::NAN;
        let w = dims[3];
        (v[2 * w + 2], v[3 * w + 3]) = (f32::NAN, f32::NAN);
        let run = |ours: bool| {
            let x = Tensor::<4>::from_data(TensorData::new(v.clone(), dims), &dev).require_grad();
            let y = if ours {
                kernels::max_pool2(x.clone())
            } else {
                burn::tensor::module::max_pool2d(x.clone(), burn::tensor::ops::MaxPoolOptions::new([2, 2]))
            };
            let r = Tensor::<4>::from_data(TensorData::new(values(y.shape().num_elements(), 0.8), y.dims()), &dev);
            let grads = (y.clone() * r).sum().backward();
            let bits = |t: Vec<f32>| t.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            (bits(host(y)), bits(host(x.grad(&grads).unwrap())))
        };
        assert_eq!(run(true), run(false), "{dims:?}");
    }
}

/// Output and the input, weight and bias gradients of `sum(y * r)` for the fully connected
/// layer `y = x W^T + b` (then a ReLU when `relu`), by the kernels (`ours`) or Burn's ops.
fn linear(dev: &Device, (n, d_in, d_out): (usize, usize, usize), x: &[f32], relu: bool, ours: bool) -> [Vec<f32>; 4] {
    let x = Tensor::<2>::from_data(TensorData::new(x.to_vec(), [n, d_in]), dev).require_grad();
    let w = Tensor::<2>::from_data(TensorData::new(values(d_out * d_in, 0.7), [d_out, d_in]), dev).require_grad();
    let b = Tensor::<1>::from_data(TensorData::new(values(d_out, 0.3), [d_out]), dev).require_grad();
    let y = if ours {
        kernels::linear_then(x.clone(), w.clone(), b.clone(), relu)
    } else {
        let y = x.clone().matmul(w.clone().transpose()) + b.clone().unsqueeze();
        if relu { burn::tensor::activation::relu(y) } else { y }
    };
    let r = Tensor::<2>::from_data(TensorData::new(values(n * d_out, 0.9), [n, d_out]), dev);
    let grads = (y.clone() * r).sum().backward();
    [host(y), host(x.grad(&grads).unwrap()), host(w.grad(&grads).unwrap()), host(b.grad(&grads).unwrap())]
}

/// `(batch, in, out)`: batch 1, sizes no SIMD width divides, and the AlexNet head's first
/// layer at a simulated worker's batch (several blocks of features per product).
const LINEAR_CASES: [(usize, usize, usize); 4] = [(1, 7, 3), (5, 33, 17), (32, 2048, 512), (3, 130, 1000)];

#[test]
fn fused_linear_matches_burns_matmul_bias_and_relu_with_gradients() {
    let dev = Device::flex().autodiff();
    for case in LINEAR_CASES {
        for relu in [false, true] {
            let x = values(case.0 * case.1, 0.1);
            let (ours, burn) = (linear(&dev, case, &x, relu, true), linear(&dev, case, &x, relu, false));
            for (what, (a, b)) in ["output", "input gradient", "weight gradient", "bias gradient"].iter().zip(ours.iter().zip(&burn)) {
                let e = rel(a, b);
                assert!(e < 1e-5, "{what} of {case:?} (relu {relu}): relative difference {e}");
            }
        }
    }
    // Without autodiff, the forward pass alone.
    let dev = Device::flex();
    let (n, d_in, d_out) = LINEAR_CASES[1];
    let x = Tensor::<2>::from_data(TensorData::new(values(n * d_in, 0.2), [n, d_in]), &dev);
    let w = Tensor::<2>::from_data(TensorData::new(values(d_out * d_in, 0.4), [d_out, d_in]), &dev);
    let b = Tensor::<1>::from_data(TensorData::new(values(d_out, 0.5), [d_out]), &dev);
    let e = rel(&host(kernels::linear_then(x.clone(), w.clone(), b.clone(), false)), &host(x.matmul(w.transpose()) + b.unsqueeze()));
    assert!(e < 1e-5, "{e}");
}

/// A NaN input (a flipped exponent) reaches the fused layer's output and gradients where it
/// reaches Burn's matmul and `relu`.
#[test]
fn a_nan_passes_the_fused_linear_layer_as_it_passes_burns() {
    let dev = Device::flex().autodiff();
    let case = LINEAR_CASES[1];
    let mut x = values(case.0 * case.1, 0.1);
    x[40] = f32::NAN; // row 1
    let (ours, burn) = (linear(&dev, case, &x, true, true), linear(&dev, case, &x, true, false));
    for (i, (a, b)) in ours.iter().zip(&burn).enumerate() {
        let nans = |t: &[f32]| t.iter().map(|x| x.is_nan()).collect::<Vec<_>>();
        assert_eq!(nans(a), nans(b), "value {i}");
    }
    assert_eq!(ours[0].iter().filter(|x| x.is_nan()).count(), case.2, "row 1 of the output is NaN");
}

/// A backward pass from a gradient message (`backward_from`) gives `(y * upstream).sum()`'s
/// gradients bit for bit, for an upstream with or without autodiff; the anchor's op scales
/// `upstream` by its own gradient when that is not 1.
#[test]
fn a_backward_pass_from_an_upstream_gradient_matches_the_product_formulation() {
    use burn::backend::Dispatch;
    use kernels::ConvKernels;
    let dev = Device::flex().autodiff();
    let case = CASES[1];
    let (n, ci, [h, w], co, k, stride, padding, dilation) = case;
    let run = |how: u8| {
        let x = Tensor::<4>::from_data(TensorData::new(values(n * ci * h * w, 0.1), [n, ci, h, w]), &dev).require_grad();
        let wt = Tensor::<4>::from_data(TensorData::new(values(co * ci * k[0] * k[1], 0.7), [co, ci, k[0], k[1]]), &dev).require_grad();
        let y = kernels::conv2d_then(x.clone(), wt.clone(), None, ConvOptions::new(stride, padding, dilation, 1), true);
        let u = Tensor::<4>::from_data(TensorData::new(values(y.shape().num_elements(), 0.9), y.dims()), &Device::flex());
        let grads = match how {
            0 => (y * u).sum().backward(),
            1 => kernels::backward_from(y, u, kernels::Kernels::Resilab),
            2 => kernels::backward_from(y, u.autodiff(), kernels::Kernels::Resilab),
            _ => (Tensor::<1>::from_dispatch(<Dispatch as ConvKernels>::resilab_seed(y.into_dispatch(), u.autodiff().into_dispatch()))
                * 3.0)
                .backward(),
        };
        let bits = |t: Vec<f32>| t.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        [bits(host(x.grad(&grads).unwrap())), bits(host(wt.grad(&grads).unwrap()))]
    };
    let want = run(0);
    assert_eq!(run(1), want);
    assert_eq!(run(2), want);
    // Three times the upstream gradient: the convolution's gradients scale by 3 (to rounding).
    let scaled = run(3);
    for (a, b) in scaled.iter().zip(&want) {
        let (a, b): (Vec<f32>, Vec<f32>) =
            (a.iter().map(|&v| f32::from_bits(v)).collect(), b.iter().map(|&v| 3.0 * f32::from_bits(v)).collect());
        assert!(rel(&a, &b) < 1e-5);
    }
}

/// The kernel choice is a value each network carries, not process state: two copies of one
/// network, one on each path, train-mode forward and backward side by side on two threads, and
/// agree within float rounding (the paths round differently, so their bits differ); the Burn
/// copy gives exactly what the network as built gives.
#[test]
fn each_network_runs_the_kernels_it_carries_side_by_side() {
    use resilab_models::{Arch, InputShape, Kernels, Mode, ModelConfig, init_parameters};
    let dev = Device::flex().autodiff();
    let cfg = ModelConfig { arch: Arch::Resnet, depth: Some(8), width: 0.25, batch_norm: None };
    let net = init_parameters(cfg.build(InputShape { channels: 3, size: 8 }, 4, &dev).unwrap(), 3, &dev);
    let x = Tensor::<4>::from_data(TensorData::new(values(2 * 3 * 8 * 8, 0.2), [2, 3, 8, 8]), &dev);
    let run = |net: resilab_models::Net| {
        let mut net = net;
        let y = net.forward(x.clone(), Mode::Train);
        let grads = y.clone().sum().backward();
        let Some(resilab_models::Block::Conv(stem)) = net.blocks.first() else { panic!("a ResNet starts with its stem") };
        [host(y), host(stem.conv.weight.val().grad(&grads).unwrap())]
    };
    let (ours, burn) = std::thread::scope(|s| {
        let a = s.spawn(|| run(net.clone().with_kernels(Kernels::Resilab)));
        let b = s.spawn(|| run(net.clone().with_kernels(Kernels::Burn)));
        (a.join().unwrap(), b.join().unwrap())
    });
    let bits = |v: &[Vec<f32>; 2]| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&run(net.clone())), bits(&burn), "a network is built on Burn's path");
    assert_ne!(bits(&ours), bits(&burn), "the resilab copy ran resilab's kernels");
    for (o, b) in ours.iter().zip(&burn) {
        assert!(rel(o, b) < 1e-4, "{}", rel(o, b));
    }
}
