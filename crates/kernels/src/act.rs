//! The ReLU of Burn and PyTorch, for the kernels that fuse it: NaN passes through it (a
//! `max(0, v)` would turn a NaN that a bit flip caused into 0), and so does the gradient at a
//! NaN output.

use crate::raw::Out;
use crate::simd::vectorized;

/// `v` when positive or NaN, else 0 (also for -0).
#[inline(always)]
pub(crate) fn relu(v: f32) -> f32 {
    if v.is_nan() || v > 0.0 { v } else { 0.0 }
}

/// The gradient through a ReLU with output `y`: `dy` where `y` is positive or NaN, 0 elsewhere,
/// in a new vector of the shorter length, threaded over runs of values.
pub fn relu_grad_new(y: &[f32], dy: &[f32]) -> Vec<f32> {
    /// Values per task.
    const RUN: usize = 1 << 14;
    Out::New(y.len().min(dy.len())).write(RUN, |i, out| {
        let (y, dy) = (&y[i * RUN..][..out.len()], &dy[i * RUN..][..out.len()]);
        vectorized(
            #[inline(always)]
            || {
                for ((o, &yv), &d) in out.iter_mut().zip(y).zip(dy) {
                    *o = if yv <= 0.0 { 0.0 } else { d };
                }
            },
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_passes_and_the_gradient_is_cut_where_the_output_is_not_positive() {
        assert!(relu(f32::NAN).is_nan());
        assert_eq!([relu(-0.0).to_bits(), relu(-2.0).to_bits(), relu(3.0).to_bits()], [0, 0, 3.0f32.to_bits()]);
        let y = [1.0, 0.0, -0.0, f32::NAN, 2.0];
        assert_eq!(relu_grad_new(&y, &[5.0, 6.0, 7.0, 8.0, 9.0]), [5.0, 0.0, 0.0, 8.0, 9.0]);
        let long: Vec<f32> = (0..40_000).map(|i| (i % 3) as f32 - 1.0).collect();
        let g = relu_grad_new(&long, &vec![1.0; 40_000]);
        assert!(g.iter().zip(&long).all(|(g, y)| *g == if *y > 0.0 { 1.0 } else { 0.0 }));
    }
}
