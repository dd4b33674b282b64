//! 2x2 max pooling at stride 2 (no padding, floor: an odd last row or column is dropped),
//! forward with the position of each window's maximum, and backward.
//!
//! The maximum follows Burn's flex (and PyTorch): the window is read row by row, its first
//! value starts as the maximum, a later value replaces it when it is larger or NaN, so a NaN
//! anywhere in the window is the output (the last NaN's position is recorded). Windows do not
//! overlap, so the backward pass writes each input gradient once: the output gradient at the
//! recorded position, zero elsewhere. Planes are independent; results do not depend on the
//! thread count.

use rayon::prelude::*;

use crate::error::{Error, Kernel, check_len};
use crate::raw::Out;
pub use crate::shape::Pool2;
use crate::simd::vectorized;

impl Pool2 {
    /// Output height and width.
    pub fn out_hw(&self) -> [usize; 2] {
        [self.h / 2, self.w / 2]
    }

    fn planes(&self) -> usize {
        self.batch * self.channels
    }

    fn check(&self, name: &'static str, got: usize, want: usize) -> Result<(), Error> {
        check_len(|| Kernel::Pool(*self), name, got, want)
    }

    fn lens(&self) -> (usize, usize) {
        let [oh, ow] = self.out_hw();
        (self.planes() * self.h * self.w, self.planes() * oh * ow)
    }
}

/// The forward pass: `y` and, in `arg`, each window's position of its maximum (`2 * dy + dx`).
///
/// # Errors
/// When a buffer's length does not match the shape.
pub fn forward(s: &Pool2, x: &[f32], y: &mut [f32], arg: &mut [u8]) -> Result<(), Error> {
    let (nx, ny) = s.lens();
    s.check("input", x.len(), nx)?;
    s.check("output", y.len(), ny)?;
    s.check("positions", arg.len(), ny)?;
    let ([oh, ow], (h, w)) = (s.out_hw(), (s.h, s.w));
    if ny == 0 {
        return Ok(());
    }
    y.par_chunks_mut(oh * ow).zip(arg.par_chunks_mut(oh * ow)).enumerate().for_each(|(i, (y, arg))| {
        let plane = &x[i * h * w..][..h * w];
        vectorized(
            #[inline(always)]
            || {
                for (oy, (yr, ar)) in y.chunks_exact_mut(ow).zip(arg.chunks_exact_mut(ow)).enumerate() {
                    let (top, bottom) = (&plane[2 * oy * w..][..2 * ow], &plane[(2 * oy + 1) * w..][..2 * ow]);
                    row(top, bottom, yr, ar);
                }
            },
        );
    });
    Ok(())
}

/// One row of windows: `top` and `bottom` are the two input rows (`2 * y.len()` values each).
/// Branch-free selects in the order of the definition (first value, then each later one that
/// is larger or NaN), so that the loop vectorises: AlexNet/2's three pooling layers (batch 64,
/// one thread, AMD EPYC) took 1.1 ms instead of 5.0 with an `if` per value, same bits.
#[inline(always)]
fn row(top: &[f32], bottom: &[f32], y: &mut [f32], arg: &mut [u8]) {
    let (top, bottom) = (&top[..2 * y.len()], &bottom[..2 * y.len()]);
    for (((o, a), t), b) in y.iter_mut().zip(arg.iter_mut()).zip(top.chunks_exact(2)).zip(bottom.chunks_exact(2)) {
        let (mut best, mut at) = (t[0], 0u8);
        for (j, v) in [(1u8, t[1]), (2, b[0]), (3, b[1])] {
            let take = v > best || v.is_nan();
            best = if take { v } else { best };
            at = if take { j } else { at };
        }
        (*o, *a) = (best, at);
    }
}

/// The backward pass: `dx` from the output gradient `dy` and the forward pass's positions.
///
/// # Errors
/// When a buffer's length does not match the shape.
pub fn backward(s: &Pool2, dy: &[f32], arg: &[u8], dx: &mut [f32]) -> Result<(), Error> {
    backward_to(s, dy, arg, Out::Into(dx)).map(drop)
}

/// The backward pass into a new vector.
///
/// # Errors
/// When a buffer's length does not match the shape.
pub fn backward_new(s: &Pool2, dy: &[f32], arg: &[u8]) -> Result<Vec<f32>, Error> {
    backward_to(s, dy, arg, Out::New(s.lens().0))
}

fn backward_to(s: &Pool2, dy: &[f32], arg: &[u8], dx: Out<'_>) -> Result<Vec<f32>, Error> {
    let (nx, ny) = s.lens();
    s.check("output gradient", dy.len(), ny)?;
    s.check("positions", arg.len(), ny)?;
    s.check("input gradient", dx.len(), nx)?;
    let ([oh, ow], (h, w)) = (s.out_hw(), (s.h, s.w));
    if nx == 0 {
        return Ok(Vec::new());
    }
    Ok(dx.write(h * w, |i, plane| {
        let (dy, arg) = (&dy[i * oh * ow..][..oh * ow], &arg[i * oh * ow..][..oh * ow]);
        vectorized(
            #[inline(always)]
            || {
                for (oy, rows) in plane.chunks_exact_mut(2 * w).enumerate().take(oh) {
                    let (top, bottom) = rows.split_at_mut(w);
                    let (dy, arg) = (&dy[oy * ow..][..ow], &arg[oy * ow..][..ow]);
                    for (ox, (&g, &a)) in dy.iter().zip(arg).enumerate() {
                        let pick = |j: u8| if a == j { g } else { 0.0 };
                        (top[2 * ox], top[2 * ox + 1]) = (pick(0), pick(1));
                        (bottom[2 * ox], bottom[2 * ox + 1]) = (pick(2), pick(3));
                    }
                    // A dropped odd last column.
                    top[2 * ow..].fill(0.0);
                    bottom[2 * ow..].fill(0.0);
                }
                // A dropped odd last row.
                plane[2 * oh * w..].fill(0.0);
            },
        );
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn values(n: usize, salt: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + salt) * 0.618_034).fract() - 0.5).collect()
    }

    /// The definition: each output is the window's maximum, NaN winning, as flex reads it.
    fn naive(s: &Pool2, x: &[f32]) -> (Vec<f32>, Vec<usize>) {
        let [oh, ow] = s.out_hw();
        let (mut y, mut at) = (Vec::new(), Vec::new());
        for p in 0..s.planes() {
            for oy in 0..oh {
                for ox in 0..ow {
                    let idx = |dy: usize, dx: usize| p * s.h * s.w + (2 * oy + dy) * s.w + 2 * ox + dx;
                    let mut best = (x[idx(0, 0)], idx(0, 0));
                    for (dy, dx) in [(0, 1), (1, 0), (1, 1)] {
                        let v = x[idx(dy, dx)];
                        if v > best.0 || v.is_nan() {
                            best = (v, idx(dy, dx));
                        }
                    }
                    y.push(best.0);
                    at.push(best.1);
                }
            }
        }
        (y, at)
    }

    #[test]
    fn forward_and_backward_follow_the_definition_on_odd_sizes_and_nans() {
        for s in [
            Pool2 { batch: 2, channels: 3, h: 7, w: 9 },
            Pool2 { batch: 1, channels: 5, h: 8, w: 6 },
            Pool2 { batch: 3, channels: 1, h: 1, w: 4 },
            // Rows of 35 windows: whole SIMD vectors of them and a remainder.
            Pool2 { batch: 2, channels: 2, h: 5, w: 71 },
        ] {
            let (nx, ny) = s.lens();
            let mut x = values(nx, 0.3);
            // Ties, infinities and NaNs (one, and two in one window), in every position of a
            // window across the wide rows.
            x[0] = 0.25;
            x[1] = 0.25;
            for (i, v) in (5..nx).step_by(13).zip([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.25].into_iter().cycle()) {
                x[i] = v;
            }
            x[nx / 2] = f32::NAN;
            x[nx - 1] = f32::NAN;
            x[nx - 2] = f32::NAN;
            let (want_y, want_at) = naive(&s, &x);
            let (mut y, mut arg) = (vec![0.0; ny], vec![9u8; ny]);
            forward(&s, &x, &mut y, &mut arg).unwrap();
            assert_eq!(y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want_y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "{s:?}");
            let dy = values(ny, 0.7);
            let mut dx = vec![f32::NAN; nx];
            backward(&s, &dy, &arg, &mut dx).unwrap();
            let mut want_dx = vec![0.0; nx];
            for (g, &at) in dy.iter().zip(&want_at) {
                want_dx[at] = *g;
            }
            assert_eq!(
                dx.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want_dx.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{s:?}"
            );
            let dx = backward_new(&s, &dy, &arg).unwrap();
            assert_eq!(
                dx.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want_dx.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_short_buffer_is_named() {
        let s = Pool2 { batch: 1, channels: 1, h: 4, w: 4 };
        assert_eq!(forward(&s, &[0.0; 16], &mut [0.0; 4], &mut [0; 3]).unwrap_err().buffer(), Some("positions"));
    }
}
