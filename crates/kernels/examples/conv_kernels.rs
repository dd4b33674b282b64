//! resilab's convolution kernels alone, per layer shape of the benchmark models (batch 64):
//! the forward pass, the input gradient and the weight gradient, each timed as the best of 5
//! means of 6 calls after one untimed call, with a hash of each result's bits. A kernel change
//! that must not change results shows the same hashes before and after; its speed shows in the
//! times. Builds in seconds (only the kernels crate), where the `conv_backward` example of
//! `resilab-models` also times Burn's flex and checks against it.
//!
//! ```text
//! RAYON_NUM_THREADS=1 cargo run --release -p resilab-kernels --features avx512 --example conv_kernels
//! ```
//!
//! The last two lines sum AlexNet's five convolutions at width 0.25 (the campaign benchmark's
//! model) and 0.5 (the training benchmark's); the first layer's input gradient is left out, as
//! training never computes it.

use std::time::Instant;

use resilab_kernels::{Conv2d, conv};

/// Batch size of every measurement.
const BATCH: usize = 64;

/// `(channels in, channels out, kernel, height = width)`, "same" padding, stride 1: AlexNet at
/// width 0.25 (the first five), AlexNet at width 0.5 (the next five), then ResNet and VGG
/// shapes.
const SHAPES: [(usize, usize, usize, usize); 16] = [
    (3, 16, 5, 32),
    (16, 48, 5, 16),
    (48, 96, 3, 8),
    (96, 64, 3, 8),
    (64, 64, 3, 8),
    (3, 32, 5, 32),
    (32, 96, 5, 16),
    (96, 192, 3, 8),
    (192, 128, 3, 8),
    (128, 128, 3, 8),
    (16, 16, 3, 32),
    (32, 32, 3, 16),
    (64, 128, 3, 4),
    (128, 128, 3, 4),
    (128, 128, 3, 2),
    (8, 16, 3, 32),
];

/// Milliseconds per call of `f`: the best of 5 means of 6 calls, after one untimed call.
fn time_ms(f: &mut dyn FnMut()) -> f64 {
    f();
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..6 {
                f();
            }
            start.elapsed().as_secs_f64() * 1e3 / 6.0
        })
        .fold(f64::MAX, f64::min)
}

/// A hash of the values' bits (FNV-1a over each value's bits).
fn bits_hash(v: &[f32]) -> u64 {
    v.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| (h ^ u64::from(x.to_bits())).wrapping_mul(0x0100_0000_01b3))
}

/// Deterministic values in [-0.5, 0.5).
fn values(n: usize, salt: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + salt) * 0.618_034).fract() - 0.5).collect()
}

fn main() -> Result<(), resilab_kernels::Error> {
    let mut alexnet = [[0.0f64; 3]; 2];
    for (i, (ci, co, k, hw)) in SHAPES.into_iter().enumerate() {
        let s = Conv2d {
            batch: BATCH,
            c_in: ci,
            h: hw,
            w: hw,
            c_out: co,
            kernel: [k, k],
            stride: [1, 1],
            padding: [k / 2, k / 2],
            dilation: [1, 1],
        };
        let (nx, nw, ny) = s.lens();
        let (x, w, dy) = (values(nx, 0.1), values(nw, 0.7), values(ny, 0.9));
        let (mut y, mut dx, mut dw) = (vec![0.0; ny], vec![0.0; nx], vec![0.0; nw]);
        let mut result = Ok(());
        let mut keep = |r: Result<(), resilab_kernels::Error>| {
            if result.is_ok() {
                result = r;
            }
        };
        let forward = time_ms(&mut || keep(conv::forward(&s, &x, &w, None, &mut y)));
        let input = time_ms(&mut || keep(conv::input_grad(&s, &dy, &w, &mut dx)));
        let weight = time_ms(&mut || keep(conv::weight_grad(&s, &x, &dy, &mut dw, None)));
        result?;
        println!(
            "{ci:>3}->{co:<3} {k}x{k} {hw:>2}x{hw:<2}  forward {forward:6.2} ms  input grad {input:6.2} ms  weight grad {weight:6.2} ms  bits {:016x} {:016x} {:016x}",
            bits_hash(&y),
            bits_hash(&dx),
            bits_hash(&dw)
        );
        if let Some(sums) = alexnet.get_mut(i / 5) {
            sums[0] += forward;
            sums[1] += if i % 5 == 0 { 0.0 } else { input };
            sums[2] += weight;
        }
    }
    for ([f, i, w], width) in alexnet.into_iter().zip([4, 2]) {
        println!(
            "AlexNet/{width}'s convolutions: forward {f:.2} ms, input grad {i:.2} ms, weight grad {w:.2} ms, {:.2} ms in all",
            f + i + w
        );
    }
    Ok(())
}
