//! Fully connected layer `y = x W^T + b` (PyTorch's `[out, in]` weight layout; `x` is
//! `batch x in`, row-major), forward and both gradients as GEMMs threaded over fixed blocks
//! of rows:
//! - forward: `y^T (out x batch) = W * x^T`, blocks of output features, each packing only its
//!   rows of `W` (and `x^T`, transposed once into a row-major copy first); the bias and the
//!   ReLU are applied as `y^T` is written back as `y`;
//! - input gradient: `dx^T (in x batch) = W^T * dy^T`, blocks of input features (`dy^T` copied
//!   row-major once, likewise);
//! - weight gradient: `dW (out x in) = dy^T * x`, blocks of output features;
//! - bias gradient: `db = sum over the batch of dy`, rows added in batch order.
//!
//! At the small batches of a simulated worker (32 images), a product whose rows are the batch
//! leaves the second core idle: Burn's matmul hands it to the `gemm` crate, which packs the whole
//! weight matrix on one thread (measured: 6% of an AlexNet step at batch 32 ran on one core).
//! Blocks depend only on the shape, and each output element is one product over the full
//! inner dimension, so results are bit-identical for every thread count.

use crate::error::{Error, Kernel, check_len};
use crate::raw::{MatMut, MatRef, Out, matmul};
use crate::simd::vectorized;

/// The shape of one fully connected layer: input `[batch, d_in]`, weight `[d_out, d_in]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    /// Rows of the input (images).
    pub batch: usize,
    /// Input features.
    pub d_in: usize,
    /// Output features.
    pub d_out: usize,
}

/// Multiply-adds per block: enough to amortise a task and its packing, small enough that the
/// AlexNet head's layers split into several blocks at batch 32.
const BLOCK_WORK: usize = 1 << 19;
/// At most this many blocks per product.
const MAX_BLOCKS: usize = 8;
/// Block heights are multiples of this (the AVX-512 micro-kernel's row tile is 16 wide).
const ROW_TILE: usize = 16;
/// Values per task of the transposing write-back.
const WRITE_BACK: usize = 1 << 14;

fn check(name: &'static str, got: usize, want: usize) -> Result<(), Error> {
    check_len(|| Kernel::Linear, name, got, want)
}

/// Rows per block of a product with `rows` output rows of `work_per_row` multiply-adds each
/// (depends on the shape only).
fn block_rows(rows: usize, work_per_row: usize) -> usize {
    let blocks = (rows.saturating_mul(work_per_row) / BLOCK_WORK).clamp(1, MAX_BLOCKS);
    rows.div_ceil(blocks).next_multiple_of(ROW_TILE).min(rows).max(1)
}

/// `out[j * rows + i] = f(i, t[i * cols + j])`: the transpose of the row-major `rows x cols`
/// matrix `t`, with `f` applied on the way (`i` is `t`'s row), in a new vector.
fn transpose_new(t: &[f32], rows: usize, cols: usize, f: impl Fn(usize, f32) -> f32 + Sync + Send) -> Vec<f32> {
    let per_task = (WRITE_BACK / rows.max(1)).max(1) * rows;
    Out::New(rows * cols).write(per_task, |task, run| {
        let first = task * per_task / rows.max(1);
        for (j, row) in run.chunks_exact_mut(rows).enumerate() {
            let col = first + j;
            for (i, v) in row.iter_mut().enumerate() {
                *v = f(i, t[i * cols + col]);
            }
        }
    })
}

impl Linear {
    /// Checks the lengths of a `batch x d_in` buffer (`input`), the weight and a `batch x
    /// d_out` buffer (`output`), each given as `(name, length)` where the caller has one.
    fn check(
        &self,
        input: Option<(&'static str, usize)>,
        weight: Option<usize>,
        output: Option<(&'static str, usize)>,
    ) -> Result<(), Error> {
        if let Some((name, len)) = input {
            check(name, len, self.batch * self.d_in)?;
        }
        if let Some(len) = weight {
            check("weight", len, self.d_out * self.d_in)?;
        }
        match output {
            Some((name, len)) => check(name, len, self.batch * self.d_out),
            None => Ok(()),
        }
    }
}

/// The layer's output `x W^T + b` (then a ReLU when `relu`), `batch x d_out`, in a new vector.
///
/// # Errors
/// When a buffer's length is not the one the shape gives.
pub fn forward_new(s: &Linear, x: &[f32], w: &[f32], b: Option<&[f32]>, relu: bool) -> Result<Vec<f32>, Error> {
    s.check(Some(("input", x.len())), Some(w.len()), None)?;
    if let Some(b) = b {
        check("bias", b.len(), s.d_out)?;
    }
    let (n, k) = (s.batch, s.d_in);
    let rows = block_rows(s.d_out, n * k);
    // x^T once, row-major: every block packs it, and packing it from `x` itself (a column-major
    // view) cost 0.3-0.4 ms a block on 64 x 2048 (measured: AlexNet/2's 2048 -> 512 forward,
    // batch 64, one thread, eight blocks: 4.3 ms, 1.7-1.9 with this copy).
    let xt = transpose_new(x, n, k, |_, v| v);
    // y^T, one block of output features per task.
    let yt = Out::New(s.d_out * n).write(rows * n, |t, run| {
        let o0 = t * rows;
        let oc = run.len() / n.max(1);
        matmul(MatMut::row_major(run, oc, n), MatRef::row_major(&w[o0 * k..], oc, k), MatRef::row_major(&xt, k, n), false);
    });
    Ok(transpose_new(&yt, s.d_out, n, |o, v| {
        let v = v + b.map_or(0.0, |b| b[o]);
        if relu { crate::act::relu(v) } else { v }
    }))
}

/// The input gradient `dy W` (`batch x d_in`) from the output gradient `dy` (`batch x d_out`,
/// already through the ReLU), in a new vector.
///
/// # Errors
/// When a buffer's length is not the one the shape gives.
pub fn input_grad_new(s: &Linear, dy: &[f32], w: &[f32]) -> Result<Vec<f32>, Error> {
    s.check(None, Some(w.len()), Some(("output gradient", dy.len())))?;
    let (n, o) = (s.batch, s.d_out);
    let rows = block_rows(s.d_in, n * o);
    // dy^T once, row-major, as x^T in the forward pass.
    let dyt = transpose_new(dy, n, o, |_, v| v);
    // dx^T, one block of input features per task: W^T's rows i0.. are W's columns.
    let dxt = Out::New(s.d_in * n).write(rows * n, |t, run| {
        let i0 = t * rows;
        let ic = run.len() / n.max(1);
        matmul(MatMut::row_major(run, ic, n), MatRef::strided(&w[i0..], ic, o, 1, s.d_in), MatRef::row_major(&dyt, o, n), false);
    });
    Ok(transpose_new(&dxt, s.d_in, n, |_, v| v))
}

/// The weight gradient `dy^T x` (`d_out x d_in`), in a new vector.
///
/// # Errors
/// When a buffer's length is not the one the shape gives.
pub fn weight_grad_new(s: &Linear, x: &[f32], dy: &[f32]) -> Result<Vec<f32>, Error> {
    s.check(Some(("input", x.len())), None, Some(("output gradient", dy.len())))?;
    let (n, k) = (s.batch, s.d_in);
    let rows = block_rows(s.d_out, n * k);
    Ok(Out::New(s.d_out * k).write(rows * k, |t, run| {
        let o0 = t * rows;
        let oc = run.len() / k.max(1);
        matmul(MatMut::row_major(run, oc, k), MatRef::strided(&dy[o0..], oc, n, 1, s.d_out), MatRef::row_major(x, n, k), false);
    }))
}

/// The bias gradient: `dy`'s (`batch x d_out`) rows added in order.
///
/// # Errors
/// When `dy`'s length is not the one the shape gives.
pub fn bias_grad(s: &Linear, dy: &[f32]) -> Result<Vec<f32>, Error> {
    s.check(None, None, Some(("output gradient", dy.len())))?;
    let mut sums = vec![0.0f32; s.d_out];
    vectorized(
        #[inline(always)]
        || {
            for row in dy.chunks_exact(s.d_out.max(1)) {
                for (d, &v) in sums.iter_mut().zip(row) {
                    *d += v;
                }
            }
        },
    );
    Ok(sums)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn values(n: usize, salt: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + salt) * 0.618_034).fract() - 0.5).collect()
    }

    /// `a (m x k) * b (k x n)` in f64, element `(i, j)` from `a(i, p)` and `b(p, j)` getters.
    fn naive(m: usize, k: usize, n: usize, a: impl Fn(usize, usize) -> f32, b: impl Fn(usize, usize) -> f32) -> Vec<f32> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| f64::from(a(i, p)) * f64::from(b(p, j))).sum::<f64>() as f32;
            }
        }
        c
    }

    fn close(got: &[f32], want: &[f32]) -> bool {
        let scale = want.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
        got.len() == want.len() && got.iter().zip(want).all(|(a, b)| (a - b).abs() <= 1e-5 * scale)
    }

    /// Shapes with one block and with several (and a last block shorter than the rest).
    const SHAPES: [Linear; 4] = [
        Linear { batch: 1, d_in: 7, d_out: 3 },
        Linear { batch: 5, d_in: 33, d_out: 17 },
        Linear { batch: 32, d_in: 2048, d_out: 100 },
        Linear { batch: 3, d_in: 1500, d_out: 530 },
    ];

    #[test]
    fn forward_and_gradients_match_a_naive_product() {
        for s in SHAPES {
            let (n, i, o) = (s.batch, s.d_in, s.d_out);
            let (x, w, b, dy) = (values(n * i, 0.1), values(o * i, 0.7), values(o, 0.3), values(n * o, 0.9));
            let mut want = naive(n, i, o, |r, p| x[r * i + p], |p, c| w[c * i + p]);
            want.iter_mut().enumerate().for_each(|(e, v)| *v += b[e % o]);
            assert!(close(&forward_new(&s, &x, &w, Some(&b), false).unwrap(), &want), "forward {s:?}");
            let relu: Vec<f32> = want.iter().map(|&v| v.max(0.0)).collect();
            assert!(close(&forward_new(&s, &x, &w, Some(&b), true).unwrap(), &relu), "forward + relu {s:?}");
            let dx = naive(n, o, i, |r, p| dy[r * o + p], |p, c| w[p * i + c]);
            assert!(close(&input_grad_new(&s, &dy, &w).unwrap(), &dx), "input gradient {s:?}");
            let dw = naive(o, n, i, |r, p| dy[p * o + r], |p, c| x[p * i + c]);
            assert!(close(&weight_grad_new(&s, &x, &dy).unwrap(), &dw), "weight gradient {s:?}");
            let db: Vec<f32> = (0..o).map(|c| (0..n).map(|r| dy[r * o + c]).sum()).collect();
            assert!(close(&bias_grad(&s, &dy).unwrap(), &db), "bias gradient {s:?}");
        }
    }

    #[test]
    fn blocks_cover_the_rows_and_the_results_do_not_depend_on_the_thread_count() {
        assert_eq!(block_rows(10, 64), 10);
        assert_eq!(block_rows(512, 32 * 2048), 64);
        // 530 rows in four blocks of 144, 144, 144 and 98.
        assert_eq!(block_rows(530, 3 * 1500), 144);
        let s = SHAPES[3];
        let (x, w, dy) = (values(s.batch * s.d_in, 0.2), values(s.d_out * s.d_in, 0.4), values(s.batch * s.d_out, 0.6));
        let run =
            || (forward_new(&s, &x, &w, None, true).unwrap(), input_grad_new(&s, &dy, &w).unwrap(), weight_grad_new(&s, &x, &dy).unwrap());
        let at = |threads: usize| rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(run);
        let bits = |r: (Vec<f32>, Vec<f32>, Vec<f32>)| [r.0, r.1, r.2].map(|v| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>());
        assert_eq!(bits(at(1)), bits(at(3)));
    }

    #[test]
    fn a_wrong_length_names_the_buffer() {
        let s = SHAPES[1];
        let e = forward_new(&s, &[0.0; 3], &values(17 * 33, 0.1), None, false).unwrap_err();
        assert_eq!(e.buffer(), Some("input"));
        let e = weight_grad_new(&s, &values(5 * 33, 0.1), &[0.0; 4]).unwrap_err();
        assert_eq!(e.buffer(), Some("output gradient"));
        let e = forward_new(&s, &values(5 * 33, 0.1), &values(17 * 33, 0.1), Some(&[0.0; 2]), false).unwrap_err();
        assert_eq!(e.buffer(), Some("bias"));
    }
}
