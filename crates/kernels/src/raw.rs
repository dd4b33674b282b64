//! The crate's only `unsafe`: a bounds-checked call of the `gemm` crate's f32 matrix product,
//! and new output vectors that the threads writing them zero.
//!
//! Invariant of [`matmul`]: it calls `gemm::gemm` only after checking that every element its three
//! views can address (row `i < rows`, column `j < cols`, offset `i * rs + j * cs`, strides
//! non-negative) lies inside the slice the view borrows, and that the destination does not
//! overlap either operand (it is a `&mut` borrow, so the borrow checker already rules that
//! out). `gemm::gemm` reads and writes only those elements.
//!
//! Invariant of [`Out::write`]: a new vector's length is set only after every element of it
//! was initialised, each run of values by the `fill` just before the kernel's body sees it.
#![allow(unsafe_code)]

use std::mem::MaybeUninit;

use rayon::prelude::*;

/// Where a kernel writes an f32 output.
#[derive(Debug)]
pub enum Out<'a> {
    /// The caller's buffer, overwritten.
    Into(&'a mut [f32]),
    /// A new vector of this many values.
    New(usize),
}

impl Out<'_> {
    /// Values in the output.
    pub fn len(&self) -> usize {
        match self {
            Out::Into(buf) => buf.len(),
            Out::New(len) => *len,
        }
    }

    /// Runs `body(i, run)` on the rayon pool for each run `i` of `chunk` values of the output
    /// (the last may be shorter); returns the new vector (empty for [`Out::Into`]).
    ///
    /// A new vector is zeroed run by run, by the thread that then writes the run, while the
    /// run is in that core's cache. Allocating it zeroed instead (`vec![0.0; len]`) zeroes it
    /// on the calling thread, or faults in fresh pages there, while the pool waits.
    pub(crate) fn write(self, chunk: usize, body: impl Fn(usize, &mut [f32]) + Sync + Send) -> Vec<f32> {
        let chunk = chunk.max(1);
        match self {
            Out::Into(buf) => {
                buf.par_chunks_mut(chunk).enumerate().for_each(|(i, run)| body(i, run));
                Vec::new()
            }
            Out::New(len) => {
                let mut v = Vec::<f32>::with_capacity(len);
                v.spare_capacity_mut()[..len].par_chunks_mut(chunk).enumerate().for_each(|(i, run)| {
                    run.fill(MaybeUninit::new(0.0));
                    // SAFETY: `fill` initialised every element of `run`, and `MaybeUninit<f32>`
                    // has the layout of `f32`.
                    let run = unsafe { &mut *(std::ptr::from_mut::<[MaybeUninit<f32>]>(run) as *mut [f32]) };
                    body(i, run);
                });
                // SAFETY: the runs cover the first `len` elements of the spare capacity, and
                // each was initialised above (a panic in `body` leaves `for_each` before this).
                unsafe { v.set_len(len) };
                v
            }
        }
    }
}

/// A read-only strided matrix view of an f32 slice: element `(i, j)` at `i * rs + j * cs`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

/// A writable strided matrix view of an f32 slice.
#[derive(Debug)]
pub struct MatMut<'a> {
    data: &'a mut [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

/// One past the largest offset a `rows` x `cols` view with strides `rs`, `cs` reaches.
fn extent(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    if rows == 0 || cols == 0 { 0 } else { (rows - 1) * rs + (cols - 1) * cs + 1 }
}

impl<'a> MatRef<'a> {
    /// A row-major `rows` x `cols` matrix at the start of `data`.
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    /// The transpose of the row-major `cols` x `rows` matrix at the start of `data`.
    pub fn transposed(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, 1, rows)
    }

    /// A view with explicit strides.
    ///
    /// # Panics
    /// When the view reaches past the end of `data`.
    pub fn strided(data: &'a [f32], rows: usize, cols: usize, rs: usize, cs: usize) -> Self {
        assert!(extent(rows, cols, rs, cs) <= data.len(), "matrix view {rows}x{cols} (strides {rs}, {cs}) past a slice of {}", data.len());
        Self { data, rows, cols, rs, cs }
    }
}

impl<'a> MatMut<'a> {
    /// A row-major `rows` x `cols` matrix at the start of `data`.
    pub fn row_major(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        assert!(extent(rows, cols, cols, 1) <= data.len(), "matrix {rows}x{cols} past a slice of {}", data.len());
        Self { data, rows, cols, rs: cols, cs: 1 }
    }

    /// A view with explicit strides.
    ///
    /// # Panics
    /// When the view reaches past the end of `data`.
    pub fn strided(data: &'a mut [f32], rows: usize, cols: usize, rs: usize, cs: usize) -> Self {
        assert!(extent(rows, cols, rs, cs) <= data.len(), "matrix view {rows}x{cols} (strides {rs}, {cs}) past a slice of {}", data.len());
        Self { data, rows, cols, rs, cs }
    }
}

/// `dst = a * b`, or `dst += a * b` when `accumulate`, on the calling thread (callers thread
/// over independent products, which keeps results independent of the thread count).
///
/// # Panics
/// When the shapes do not agree.
pub fn matmul(dst: MatMut<'_>, a: MatRef<'_>, b: MatRef<'_>, accumulate: bool) {
    assert!(
        a.rows == dst.rows && b.cols == dst.cols && a.cols == b.rows,
        "matmul {}x{} = {}x{} * {}x{}",
        dst.rows,
        dst.cols,
        a.rows,
        a.cols,
        b.rows,
        b.cols
    );
    let (m, n, k) = (dst.rows, dst.cols, a.cols);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    dst.data[i * dst.rs + j * dst.cs] = 0.0;
                }
            }
        }
        return;
    }
    let i = |x: usize| x as isize;
    // SAFETY: the constructors checked that each view's extent lies inside its slice (see the
    // module's invariant); `dst` is a unique borrow, so it overlaps neither operand.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.data.as_mut_ptr(),
            i(dst.cs),
            i(dst.rs),
            accumulate,
            a.data.as_ptr(),
            i(a.cs),
            i(a.rs),
            b.data.as_ptr(),
            i(b.cs),
            i(b.rs),
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j])).sum::<f64>() as f32;
            }
        }
        c
    }

    #[test]
    fn products_match_a_naive_product_plain_transposed_and_accumulated() {
        let (m, k, n) = (7, 13, 5);
        let a: Vec<f32> = (0..m * k).map(|x| (x as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|x| (x as f32 * 0.11).cos()).collect();
        let want = naive(&a, &b, m, k, n);
        let mut c = vec![f32::NAN; m * n];
        matmul(MatMut::row_major(&mut c, m, n), MatRef::row_major(&a, m, k), MatRef::row_major(&b, k, n), false);
        assert!(c.iter().zip(&want).all(|(x, y)| (x - y).abs() < 1e-5), "{c:?}");
        // a as the transpose of its transpose.
        let at: Vec<f32> = (0..k * m).map(|x| a[(x % m) * k + x / m]).collect();
        matmul(MatMut::row_major(&mut c, m, n), MatRef::transposed(&at, m, k), MatRef::row_major(&b, k, n), true);
        assert!(c.iter().zip(&want).all(|(x, y)| (x - 2.0 * y).abs() < 1e-5));
    }

    #[test]
    fn a_new_output_is_zeroed_run_by_run_and_a_callers_buffer_is_not() {
        // Each run adds its index to what it finds: zeros in a new vector, the old values in
        // a caller's buffer; the last run is shorter.
        let body = |i: usize, run: &mut [f32]| run.iter_mut().for_each(|v| *v += i as f32);
        assert_eq!(Out::New(10).write(3, body), [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0]);
        assert!(Out::New(0).write(3, body).is_empty());
        let mut buf = [0.5; 5];
        assert!(Out::Into(&mut buf).write(2, body).is_empty());
        assert_eq!(buf, [0.5, 0.5, 1.5, 1.5, 2.5]);
    }

    #[test]
    #[should_panic(expected = "past a slice")]
    fn a_view_past_its_slice_panics_before_any_read() {
        let _ = MatRef::row_major(&[0.0; 11], 3, 4);
    }
}
