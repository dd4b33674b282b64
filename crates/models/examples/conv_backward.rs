//! Where a convolution's training time goes on the CPU, per layer shape of the benchmark
//! models (batch 64, "same" padding, stride 1): the forward pass, the input gradient and the
//! weight gradient, each by Burn's flex backend (in the formulation Burn's autodiff uses: a
//! transposed convolution for the input gradient, a convolution with the output gradient as
//! kernel for the weight gradient) and by resilab's kernels (im2col/col2im + GEMM), the latter
//! checked against the former. PyTorch's figures for the same shapes come from
//! `bench/conv_layers.py`; `bash bench/conv_layers.sh` runs both and joins them.
//!
//! ```text
//! cargo run --release -p resilab-models --example conv_backward [OUT_CSV] [--shapes]
//! ```
//!
//! Prints one line per shape and, given OUT_CSV, writes the same figures there. `--shapes`
//! prints the shapes as `ci,co,k,hw` (for the PyTorch script) and exits.

use std::time::Instant;

use burn::tensor::module::{conv_transpose2d, conv2d};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn::tensor::{Device, Distribution, Tensor};
use resilab_kernels::{Conv2d, conv};

/// Batch size of every measurement.
const BATCH: usize = 64;
/// Timed repetitions per figure (after one untimed warm-up).
const REPS: u32 = 20;

/// `(channels in, channels out, kernel, height = width)`: AlexNet's five convolutions (width
/// 0.5), the first four of AlexNet at width 0.25 (the campaign benchmark's; its fifth is the
/// 64->64 below), then 3x3 shapes of ResNet-8/20 and VGG-11 at their benchmark widths
/// (VGG-11's last four at 4x4 and 2x2, where each image has fewer output positions than a GEMM
/// tile).
const SHAPES: [(usize, usize, usize, usize); 18] = [
    (3, 32, 5, 32),
    (32, 96, 5, 16),
    (96, 192, 3, 8),
    (192, 128, 3, 8),
    (128, 128, 3, 8),
    (3, 16, 5, 32),
    (16, 48, 5, 16),
    (48, 96, 3, 8),
    (96, 64, 3, 8),
    (16, 16, 3, 32),
    (32, 32, 3, 16),
    (64, 64, 3, 8),
    (8, 16, 3, 32),
    (16, 32, 3, 16),
    (32, 64, 3, 8),
    (64, 128, 3, 4),
    (128, 128, 3, 4),
    (128, 128, 3, 2),
];

/// Mean milliseconds of `f` over [`REPS`] calls.
fn time_ms(f: &mut dyn FnMut()) -> f64 {
    f();
    let start = Instant::now();
    for _ in 0..REPS {
        f();
    }
    start.elapsed().as_secs_f64() * 1e3 / f64::from(REPS)
}

fn host<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    Ok(t.into_data().convert::<f32>().try_into_vec::<f32>()?)
}

/// Largest difference relative to the largest magnitude of `want`.
fn rel(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
    got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max) / scale
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--shapes") {
        let specs: Vec<String> = SHAPES.iter().map(|(ci, co, k, hw)| format!("{ci},{co},{k},{hw}")).collect();
        println!("{}", specs.join(" "));
        return Ok(());
    }
    let out = args.first();
    let dev = Device::flex();
    let mut csv = String::from(
        "shape,gflop_forward,flex_forward_ms,flex_input_grad_ms,flex_weight_grad_ms,resilab_forward_ms,resilab_input_grad_ms,resilab_weight_grad_ms\n",
    );
    for (ci, co, k, hw) in SHAPES {
        let pad = k / 2;
        let opts = ConvOptions::new([1, 1], [pad, pad], [1, 1], 1);
        let x = Tensor::<4>::random([BATCH, ci, hw, hw], Distribution::Default, &dev);
        let w = Tensor::<4>::random([co, ci, k, k], Distribution::Default, &dev);
        let dy = Tensor::<4>::random([BATCH, co, hw, hw], Distribution::Default, &dev);
        // Burn's backward (burn-backend's conv2d_weight_backward / conv2d_x_backward at stride 1).
        let flex_weight_grad = || conv2d(x.clone().swap_dims(0, 1), dy.clone().swap_dims(0, 1), None, opts.clone()).swap_dims(0, 1);
        let t_opts = ConvTransposeOptions::new([1, 1], [pad, pad], [0, 0], [1, 1], 1);
        let flex_input_grad = || conv_transpose2d(dy.clone(), w.clone(), None, t_opts.clone());
        let flex_forward = time_ms(&mut || drop(conv2d(x.clone(), w.clone(), None, opts.clone()).into_data()));
        let flex_dx = time_ms(&mut || drop(flex_input_grad().into_data()));
        let flex_dw = time_ms(&mut || drop(flex_weight_grad().into_data()));

        let s = Conv2d {
            batch: BATCH,
            c_in: ci,
            h: hw,
            w: hw,
            c_out: co,
            kernel: [k, k],
            stride: [1, 1],
            padding: [pad, pad],
            dilation: [1, 1],
        };
        let (xs, ws, dys) = (host(x.clone())?, host(w.clone())?, host(dy.clone())?);
        let (nx, nw, ny) = s.lens();
        let (mut y, mut dx, mut dw) = (vec![0.0; ny], vec![0.0; nx], vec![0.0; nw]);
        let ours_forward = time_ms(&mut || conv::forward(&s, &xs, &ws, None, &mut y).unwrap_or_else(|e| panic!("{e}")));
        let ours_dx = time_ms(&mut || conv::input_grad(&s, &dys, &ws, &mut dx).unwrap_or_else(|e| panic!("{e}")));
        let ours_dw = time_ms(&mut || conv::weight_grad(&s, &xs, &dys, &mut dw, None).unwrap_or_else(|e| panic!("{e}")));
        for (what, got, want) in [
            ("forward", &y, host(conv2d(x.clone(), w.clone(), None, opts.clone()))?),
            ("input gradient", &dx, host(flex_input_grad())?),
            ("weight gradient", &dw, host(flex_weight_grad())?),
        ] {
            let e = rel(got, &want);
            if e > 1e-5 {
                return Err(format!("{ci}->{co} k{k} {hw}x{hw}: resilab's {what} differs from Burn's by {e} (relative)").into());
            }
        }
        let gflop = 2.0 * (BATCH * co * hw * hw * ci * k * k) as f64 / 1e9;
        let shape = format!("{ci}->{co} k{k} {hw}x{hw}");
        println!(
            "{shape:>18} ({gflop:.3} GFLOP): forward {flex_forward:6.2} -> {ours_forward:6.2} ms, input grad {flex_dx:6.2} -> \
             {ours_dx:6.2} ms, weight grad {flex_dw:6.2} -> {ours_dw:6.2} ms (flex -> resilab)"
        );
        csv.push_str(&format!(
            "{shape},{gflop:.4},{flex_forward:.3},{flex_dx:.3},{flex_dw:.3},{ours_forward:.3},{ours_dx:.3},{ours_dw:.3}\n"
        ));
    }
    if let Some(path) = out {
        std::fs::write(path, csv).map_err(|e| format!("cannot write {path}: {e}"))?;
        println!("-> {path}");
    }
    Ok(())
}
