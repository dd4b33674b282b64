//! Training-mode batch normalisation (NCHW), optionally fused with the residual addition and
//! the ReLU that follow it in a ResNet block, forward and backward in two passes over the data
//! each.
//!
//! Forward, per channel `c` over its `M = N * H * W` values: `mean`, the biased variance `var`
//! (rounded to f32), `y = relu(gamma * (x - mean) / sqrt(var + eps) + beta (+ r))` (without
//! the ReLU when `relu` is off; `+ r` with a residual `r`). The ReLU is Burn's and PyTorch's:
//! NaN passes through (`max(0, NaN)` would hide a NaN that a bit flip caused), and so does
//! the gradient at a NaN output. A variance beyond f32's range (a channel holding values near 1e38, as
//! bit flips make them) is `inf` and gives `1 / sqrt(var + eps) = 0`, as in PyTorch's CPU
//! batch norm: the channel's output is `beta`, not NaN, and no scale is subnormal. Backward,
//! with `g = dy` masked where the ReLU cut (`y <= 0`) and `x^ = (x - mean) * inv_std`:
//! `dr = g` for the residual,
//! `dbeta = sum g`, `dgamma = sum g * x^`,
//! `dx = gamma * inv_std / M * (M * g - dbeta - x^ * dgamma)`.
//!
//! Channels are independent and each sums its values in one fixed order (eight f64 lanes,
//! added in lane order), so results depend neither on the thread count nor on the instruction
//! set the loops run with.

use rayon::prelude::*;

use crate::error::{Error, Kernel, check_len};
use crate::raw::Out;
pub use crate::shape::Norm;
use crate::simd::{LANES, Sums, vectorized};

impl Norm {
    fn check(&self, name: &'static str, got: usize, want: usize) -> Result<(), Error> {
        check_len(|| Kernel::Norm(*self), name, got, want)
    }

    fn values(&self) -> usize {
        self.batch * self.channels * self.plane
    }

    /// The planes of channel `c`, one per image.
    fn planes<'a>(&self, t: &'a [f32], c: usize) -> impl Iterator<Item = &'a [f32]> + 'a {
        let (step, plane) = (self.channels * self.plane, self.plane);
        (0..self.batch).map(move |n| &t[n * step + c * plane..][..plane])
    }
}

/// Per-channel results of the forward pass, kept for the backward pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Batch mean.
    pub mean: Vec<f32>,
    /// Biased batch variance.
    pub var: Vec<f32>,
    /// `1 / sqrt(var + eps)`.
    pub inv_std: Vec<f32>,
}

/// The forward pass into `y`; returns the batch statistics.
///
/// # Errors
/// When a buffer's length does not match the shape.
pub fn forward(s: &Norm, x: &[f32], gamma: &[f32], beta: &[f32], eps: f64, relu: bool, y: &mut [f32]) -> Result<Stats, Error> {
    forward_to(s, x, gamma, beta, eps, relu, None, Out::Into(y)).map(|(_, stats)| stats)
}

/// The forward pass into a new vector, with the batch statistics; `residual` (of `x`'s shape)
/// is added to the normalised values before the ReLU.
///
/// # Errors
/// When a buffer's length does not match the shape.
pub fn forward_new(
    s: &Norm,
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f64,
    relu: bool,
    residual: Option<&[f32]>,
) -> Result<(Vec<f32>, Stats), Error> {
    if let Some(r) = residual {
        s.check("residual", r.len(), s.values())?;
    }
    forward_to(s, x, gamma, beta, eps, relu, residual, Out::New(s.values()))
}

#[allow(clippy::too_many_arguments)] // as `forward`, with the residual and the output
fn forward_to(
    s: &Norm,
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f64,
    relu: bool,
    residual: Option<&[f32]>,
    y: Out<'_>,
) -> Result<(Vec<f32>, Stats), Error> {
    s.check("input", x.len(), s.values())?;
    s.check("output", y.len(), s.values())?;
    s.check("gamma", gamma.len(), s.channels)?;
    s.check("beta", beta.len(), s.channels)?;
    let m = (s.batch * s.plane).max(1) as f64;
    let stats: Vec<(f32, f32, f32)> = (0..s.channels)
        .into_par_iter()
        .map(|c| {
            vectorized(
                #[inline(always)]
                move || {
                    let mut sum = Sums::<1>::default();
                    for p in s.planes(x, c) {
                        sum.add(p, |v| [v.map(f64::from)]);
                    }
                    let mean = sum.totals()[0] / m;
                    let mut sq = Sums::<1>::default();
                    for p in s.planes(x, c) {
                        sq.add(p, |v| [v.map(|v| (f64::from(v) - mean).powi(2))]);
                    }
                    // 1/std from the variance as stored, in f32 (as PyTorch's CPU kernel has it): a
                    // variance past f32's range gives 1/std = 0, so the channel outputs its shift,
                    // never a subnormal scale.
                    let var = (sq.totals()[0] / m) as f32;
                    (mean as f32, var, (1.0 / (f64::from(var) + eps).sqrt()) as f32)
                },
            )
        })
        .collect();
    let step = s.channels * s.plane;
    let y = y.write(s.plane, |i, out| {
        let c = i % s.channels;
        let (mean, _, inv_std) = stats[c];
        let (scale, shift) = (gamma[c] * inv_std, beta[c] - gamma[c] * inv_std * mean);
        let at = (i / s.channels) * step + c * s.plane;
        let src = &x[at..][..s.plane];
        vectorized(
            #[inline(always)]
            move || match (relu, residual) {
                (false, None) => out.iter_mut().zip(src).for_each(|(o, &v)| *o = v * scale + shift),
                (true, None) => out.iter_mut().zip(src).for_each(|(o, &v)| *o = crate::act::relu(v * scale + shift)),
                (false, Some(r)) => out.iter_mut().zip(src).zip(&r[at..][..s.plane]).for_each(|((o, &v), &r)| *o = (v * scale + shift) + r),
                (true, Some(r)) => out
                    .iter_mut()
                    .zip(src)
                    .zip(&r[at..][..s.plane])
                    .for_each(|((o, &v), &r)| *o = crate::act::relu((v * scale + shift) + r)),
            },
        );
    });
    let stats = Stats {
        mean: stats.iter().map(|s| s.0).collect(),
        var: stats.iter().map(|s| s.1).collect(),
        inv_std: stats.iter().map(|s| s.2).collect(),
    };
    Ok((y, stats))
}

/// The backward pass: `dx`, and `dgamma`, `dbeta` (per channel). `y` is the forward output
/// (read for the ReLU's mask when `relu`).
///
/// # Errors
/// When a buffer's length does not match the shape.
#[allow(clippy::too_many_arguments)] // the op's inputs and outputs, each a plain slice
pub fn backward(
    s: &Norm,
    x: &[f32],
    y: &[f32],
    dy: &[f32],
    gamma: &[f32],
    stats: &Stats,
    relu: bool,
    dx: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) -> Result<(), Error> {
    backward_to(s, x, y, dy, gamma, stats, relu, Out::Into(dx), dgamma, dbeta).map(drop)
}

/// The backward pass with `dx` in a new vector.
///
/// # Errors
/// When a buffer's length does not match the shape.
#[allow(clippy::too_many_arguments)] // as `backward`
pub fn backward_new(
    s: &Norm,
    x: &[f32],
    y: &[f32],
    dy: &[f32],
    gamma: &[f32],
    stats: &Stats,
    relu: bool,
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) -> Result<Vec<f32>, Error> {
    backward_to(s, x, y, dy, gamma, stats, relu, Out::New(s.values()), dgamma, dbeta)
}

#[allow(clippy::too_many_arguments)] // as `backward`
fn backward_to(
    s: &Norm,
    x: &[f32],
    y: &[f32],
    dy: &[f32],
    gamma: &[f32],
    stats: &Stats,
    relu: bool,
    dx: Out<'_>,
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) -> Result<Vec<f32>, Error> {
    for (name, len) in [("input", x.len()), ("output", y.len()), ("output gradient", dy.len()), ("input gradient", dx.len())] {
        s.check(name, len, s.values())?;
    }
    for (name, len) in [
        ("gamma", gamma.len()),
        ("gamma gradient", dgamma.len()),
        ("beta gradient", dbeta.len()),
        ("mean", stats.mean.len()),
        ("inv_std", stats.inv_std.len()),
    ] {
        s.check(name, len, s.channels)?;
    }
    let g = move |yv: f32, d: f32| if relu && yv <= 0.0 { 0.0 } else { d };
    let sums: Vec<(f32, f32)> = (0..s.channels)
        .into_par_iter()
        .map(|c| {
            let (mean, inv_std) = (stats.mean[c], stats.inv_std[c]);
            vectorized(
                #[inline(always)]
                move || {
                    let mut sums = Sums::<2>::default();
                    for ((xp, yp), dp) in s.planes(x, c).zip(s.planes(y, c)).zip(s.planes(dy, c)) {
                        sums.add3(xp, yp, dp, |xv, yv, d| {
                            let gv: [f64; LANES] = std::array::from_fn(|l| f64::from(g(yv[l], d[l])));
                            [gv, std::array::from_fn(|l| gv[l] * f64::from((xv[l] - mean) * inv_std))]
                        });
                    }
                    let [sum, dot] = sums.totals();
                    (sum as f32, dot as f32)
                },
            )
        })
        .collect();
    for (c, &(sum, dot)) in sums.iter().enumerate() {
        dbeta[c] = sum;
        dgamma[c] = dot;
    }
    let m = (s.batch * s.plane).max(1) as f32;
    let step = s.channels * s.plane;
    Ok(dx.write(s.plane, |i, out| {
        let (n, c) = (i / s.channels, i % s.channels);
        let (mean, inv_std, (sum, dot)) = (stats.mean[c], stats.inv_std[c], sums[c]);
        let k = gamma[c] * inv_std / m;
        let at = n * step + c * s.plane;
        let (xp, yp, dp) = (&x[at..][..s.plane], &y[at..][..s.plane], &dy[at..][..s.plane]);
        // `move` (here and in the closures above): the closure holds copies of the channel's
        // scalars, not references, which the output's stores could alias as far as LLVM can
        // tell. With references it reloaded them for every value and left this loop scalar:
        // 1.7 ns per value, and ResNet-20 steps 8% slower (docs/performance.md).
        vectorized(
            #[inline(always)]
            move || {
                for (((o, &xv), &yv), &d) in out.iter_mut().zip(xp).zip(yp).zip(dp) {
                    let xhat = (xv - mean) * inv_std;
                    *o = k * (m * g(yv, d) - sum - xhat * dot);
                }
            },
        );
    }))
}

/// The gradient reaching the residual of a fused forward pass (`relu` on): `dy` where the
/// output `y` is positive or NaN, 0 elsewhere, in a new vector.
///
/// # Errors
/// When `dy` and `y` differ in length.
pub fn residual_grad_new(s: &Norm, y: &[f32], dy: &[f32]) -> Result<Vec<f32>, Error> {
    s.check("output", y.len(), s.values())?;
    s.check("output gradient", dy.len(), s.values())?;
    Ok(crate::act::relu_grad_new(y, dy))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn values(n: usize, salt: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + salt) * 0.618_034).fract() * 4.0 - 1.5).collect()
    }

    /// Loss `sum(y * r)`: its gradients by central differences in f64.
    fn numeric(s: &Norm, x: &[f32], gamma: &[f32], beta: &[f32], r: &[f32], relu: bool) -> Vec<f64> {
        let loss = |x: &[f32]| {
            let mut y = vec![0.0; s.values()];
            forward(s, x, gamma, beta, 1e-5, relu, &mut y).unwrap();
            y.iter().zip(r).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>()
        };
        (0..x.len())
            .map(|i| {
                let h = 1e-2f32;
                let (mut up, mut down) = (x.to_vec(), x.to_vec());
                up[i] += h;
                down[i] -= h;
                (loss(&up) - loss(&down)) / (2.0 * f64::from(h))
            })
            .collect()
    }

    #[test]
    fn forward_normalises_each_channel_and_backward_matches_finite_differences() {
        for relu in [false, true] {
            let s = Norm { batch: 3, channels: 5, plane: 7 };
            let (x, gamma, beta, r) = (values(105, 0.1), values(5, 0.4), values(5, 0.8), values(105, 0.3));
            let mut y = vec![0.0; 105];
            let stats = forward(&s, &x, &gamma, &beta, 1e-5, relu, &mut y).unwrap();
            let mean0 = s.planes(&x, 0).flatten().sum::<f32>() / 21.0;
            assert!((stats.mean[0] - mean0).abs() < 1e-5);
            let (mut dx, mut dg, mut db) = (vec![0.0; 105], vec![0.0; 5], vec![0.0; 5]);
            backward(&s, &x, &y, &r, &gamma, &stats, relu, &mut dx, &mut dg, &mut db).unwrap();
            let want = numeric(&s, &x, &gamma, &beta, &r, relu);
            // Differences across the ReLU's kink say nothing: skip values next to it.
            for (i, (a, b)) in dx.iter().zip(&want).enumerate().filter(|(i, _)| !relu || y[*i].abs() > 0.1) {
                assert!((f64::from(*a) - b).abs() < 2e-2 * b.abs().max(0.5), "relu {relu}, dx[{i}]: {a} vs {b}");
            }
        }
    }

    #[test]
    fn results_are_bit_identical_for_every_thread_count() {
        let s = Norm { batch: 4, channels: 9, plane: 30 };
        let (x, gamma, beta, dy) = (values(1080, 0.2), values(9, 0.5), values(9, 0.6), values(1080, 0.7));
        let run = || {
            let mut y = vec![0.0; 1080];
            let stats = forward(&s, &x, &gamma, &beta, 1e-5, true, &mut y).unwrap();
            let (mut dx, mut dg, mut db) = (vec![0.0; 1080], vec![0.0; 9], vec![0.0; 9]);
            backward(&s, &x, &y, &dy, &gamma, &stats, true, &mut dx, &mut dg, &mut db).unwrap();
            (y, dx, dg, db)
        };
        let at = |t: usize| rayon::ThreadPoolBuilder::new().num_threads(t).build().unwrap().install(run);
        let one = at(1);
        assert!(at(3) == one);
        // The new-vector variants, on 2 threads, give the same bits.
        let new = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap().install(|| {
            let (y, stats) = forward_new(&s, &x, &gamma, &beta, 1e-5, true, None).unwrap();
            let (mut dg, mut db) = (vec![0.0; 9], vec![0.0; 9]);
            let dx = backward_new(&s, &x, &y, &dy, &gamma, &stats, true, &mut dg, &mut db).unwrap();
            (y, dx, dg, db)
        });
        assert!(new == one);
    }

    #[test]
    fn the_fused_residual_and_relu_equal_the_ops_one_by_one_and_let_nan_pass() {
        let s = Norm { batch: 3, channels: 4, plane: 10 };
        let (mut x, gamma, beta, r, dy) = (values(120, 0.1), values(4, 0.4), values(4, 0.8), values(120, 0.6), values(120, 0.9));
        x[5] = f32::NAN; // channel 0: its mean, and so all its outputs, are NaN
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let mut plain = vec![0.0; 120];
        forward(&s, &x, &gamma, &beta, 1e-5, false, &mut plain).unwrap();
        let relu = |z: f32| if z.is_nan() || z > 0.0 { z } else { 0.0 };
        let want: Vec<f32> = plain.iter().zip(&r).map(|(v, r)| relu(v + r)).collect();
        let (y, _) = forward_new(&s, &x, &gamma, &beta, 1e-5, true, Some(&r)).unwrap();
        assert_eq!(bits(&y), bits(&want));
        assert!(s.planes(&y, 0).flatten().all(|v| v.is_nan()) && y.contains(&0.0), "{y:?}");
        let (y_relu, _) = forward_new(&s, &x, &gamma, &beta, 1e-5, true, None).unwrap();
        assert_eq!(bits(&y_relu), bits(&plain.iter().map(|&v| relu(v)).collect::<Vec<_>>()));
        // The residual's gradient: dy where the output is positive or NaN.
        let dr = residual_grad_new(&s, &y, &dy).unwrap();
        for ((g, &yv), &d) in dr.iter().zip(&y).zip(&dy) {
            assert_eq!(g.to_bits(), if yv.is_nan() || yv > 0.0 { d } else { 0.0 }.to_bits());
        }
        assert!(forward_new(&s, &x, &gamma, &beta, 1e-5, true, Some(&r[1..])).unwrap_err().to_string().contains("residual holds 119"));
    }

    #[test]
    fn a_channel_beyond_f32s_range_outputs_its_shift_and_a_finite_gradient() {
        let s = Norm { batch: 2, channels: 2, plane: 4 };
        let mut x = values(16, 0.2);
        (x[0], x[9]) = (3e38, -2e38); // both in channel 0 (image 0 and image 1)
        let (gamma, beta) = (vec![1.5, 0.5], vec![0.25, -0.75]);
        let mut y = vec![0.0; 16];
        let stats = forward(&s, &x, &gamma, &beta, 1e-5, false, &mut y).unwrap();
        assert!(stats.var[0].is_infinite() && stats.inv_std[0] == 0.0, "{stats:?}");
        assert!(s.planes(&y, 0).flatten().all(|&v| v == 0.25), "{y:?}");
        assert!(stats.inv_std[1].is_normal() && s.planes(&y, 1).flatten().all(|v| v.is_finite()));
        let (mut dx, mut dg, mut db) = (vec![0.0; 16], vec![0.0; 2], vec![0.0; 2]);
        backward(&s, &x, &y, &values(16, 0.5), &gamma, &stats, false, &mut dx, &mut dg, &mut db).unwrap();
        assert!(s.planes(&dx, 0).flatten().all(|&v| v == 0.0) && dx.iter().all(|v| v.is_finite()), "{dx:?}");
    }

    #[test]
    fn a_short_buffer_is_named() {
        let s = Norm { batch: 1, channels: 2, plane: 2 };
        let err = forward(&s, &[0.0; 4], &[1.0; 2], &[0.0; 1], 1e-5, false, &mut [0.0; 4]).unwrap_err();
        assert_eq!(err.buffer(), Some("beta"));
    }
}
