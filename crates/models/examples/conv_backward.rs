//! Where a convolution's training time goes on the CPU backend, per layer shape of the width-0.25
//! models (batch 64): the forward pass, the weight gradient and the input gradient in the
//! formulation Burn's autodiff uses for them, and the weight gradient computed the way PyTorch's CPU backend does
//! it, as one GEMM of the output gradient with an im2col of the input (the im2col built in plain
//! Rust, the GEMM by the backend's matmul).
//!
//! ```text
//! RAYON_NUM_THREADS=1 cargo run --release -p resilab-models --example conv_backward [OUT_CSV]
//! ```
//!
//! Prints one line per shape and, given OUT_CSV, writes the same figures there.

use std::time::Instant;

use burn::tensor::module::{conv2d, conv_transpose2d};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn::tensor::{Device, Distribution, Tensor, TensorData};

/// Batch size of every measurement.
const BATCH: usize = 64;
/// Timed repetitions per figure (after one untimed warm-up).
const REPS: u32 = 20;

/// `(channels in, channels out, kernel, height = width)`: AlexNet's five convolutions, then
/// 3x3 shapes of ResNet-8 and VGG-11 at width 0.25.
const SHAPES: [(usize, usize, usize, usize); 9] = [
    (3, 16, 5, 32),
    (16, 48, 5, 16),
    (48, 96, 3, 8),
    (96, 64, 3, 8),
    (64, 64, 3, 8),
    (16, 16, 3, 32),
    (32, 32, 3, 16),
    (8, 16, 3, 32),
    (16, 32, 3, 16),
];

/// Mean milliseconds of `f` over [`REPS`] calls.
fn time_ms(f: &dyn Fn()) -> f64 {
    f();
    let start = Instant::now();
    for _ in 0..REPS {
        f();
    }
    start.elapsed().as_secs_f64() * 1e3 / f64::from(REPS)
}

/// The im2col of `x` (`[b, c, hw, hw]`, "same" padding): `[b * hw * hw, c * k * k]`.
fn im2col(x: &[f32], c: usize, hw: usize, k: usize) -> Vec<f32> {
    let kk = c * k * k;
    let pad = k / 2;
    let mut cols = vec![0f32; BATCH * hw * hw * kk];
    for (p, row) in cols.chunks_exact_mut(kk).enumerate() {
        let (b, oy, ox) = (p / (hw * hw), p / hw % hw, p % hw);
        for ch in 0..c {
            let plane = &x[(b * c + ch) * hw * hw..][..hw * hw];
            for ky in 0..k {
                let Some(iy) = (oy + ky).checked_sub(pad).filter(|&iy| iy < hw) else { continue };
                for kx in 0..k {
                    if let Some(ix) = (ox + kx).checked_sub(pad).filter(|&ix| ix < hw) {
                        row[(ch * k + ky) * k + kx] = plane[iy * hw + ix];
                    }
                }
            }
        }
    }
    cols
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args().nth(1);
    let dev = Device::flex();
    let mut csv = String::from("shape,forward_ms,weight_grad_ms,input_grad_ms,im2col_gemm_weight_grad_ms\n");
    for (ci, co, k, hw) in SHAPES {
        let opts = ConvOptions::new([1, 1], [k / 2, k / 2], [1, 1], 1);
        let x = Tensor::<4>::random([BATCH, ci, hw, hw], Distribution::Default, &dev);
        let w = Tensor::<4>::random([co, ci, k, k], Distribution::Default, &dev);
        let bias = Tensor::<1>::random([co], Distribution::Default, &dev);
        let dy = Tensor::<4>::random([BATCH, co, hw, hw], Distribution::Default, &dev);
        let forward = time_ms(&|| {
            let _ = conv2d(x.clone(), w.clone(), Some(bias.clone()), opts.clone()).into_data();
        });
        // Burn's backward (burn-backend's conv2d_weight_backward / conv2d_x_backward at stride 1):
        // the weight gradient is a convolution of the input, batch and channels swapped, with
        // the output gradient as its kernel; the input gradient a transposed convolution.
        let burn_weight_grad = || {
            let swapped = conv2d(x.clone().swap_dims(0, 1), dy.clone().swap_dims(0, 1), None, opts.clone());
            swapped.swap_dims(0, 1)
        };
        let weight_grad = time_ms(&|| {
            let _ = burn_weight_grad().into_data();
        });
        let input_grad = time_ms(&|| {
            let t_opts = ConvTransposeOptions::new([1, 1], [k / 2, k / 2], [0, 0], [1, 1], 1);
            let _ = conv_transpose2d(dy.clone(), w.clone(), None, t_opts).into_data();
        });
        let gemm_weight_grad = || {
            let xs = x.clone().into_data().convert::<f32>().try_into_vec::<f32>()?;
            let cols = im2col(&xs, ci, hw, k);
            let cols = Tensor::<2>::from_data(TensorData::new(cols, [BATCH * hw * hw, ci * k * k]), &dev);
            let grad = dy.clone().swap_dims(0, 1).reshape([co, BATCH * hw * hw]).matmul(cols);
            Ok::<_, burn::tensor::DataError>(grad.reshape([co, ci, k, k]))
        };
        let reference = burn_weight_grad();
        let scale = reference.clone().abs().max().into_scalar::<f32>();
        let diff = (gemm_weight_grad()? - reference).abs().max().into_scalar::<f32>();
        if diff > 1e-4 * scale {
            return Err(format!("im2col + GEMM weight gradient differs from Burn's by {diff} (max {scale})").into());
        }
        let gemm = time_ms(&|| {
            let _ = gemm_weight_grad().map(Tensor::into_data);
        });
        let shape = format!("{ci}->{co} k{k} {hw}x{hw}");
        println!(
            "{shape:>18}: forward {forward:6.2} ms, weight grad {weight_grad:6.2} ms, input grad \
             {input_grad:6.2} ms; im2col + GEMM weight grad {gemm:6.2} ms"
        );
        csv.push_str(&format!("{shape},{forward:.2},{weight_grad:.2},{input_grad:.2},{gemm:.2}\n"));
    }
    if let Some(path) = out {
        std::fs::write(&path, csv).map_err(|e| format!("cannot write {path}: {e}"))?;
        println!("-> {path}");
    }
    Ok(())
}
