//! 2-D convolution (NCHW, one group) forward, input gradient and weight gradient as GEMMs.
//!
//! Per image, with `K = c_in * kh * kw` and `P = out_h * out_w`:
//! - forward: `y[n] (c_out x P) = W (c_out x K) * col(x[n]) (K x P) + b`;
//! - input gradient: `dx[n] = col2im(W^T (K x c_out) * dy[n] (c_out x P))`;
//! - weight gradient: `dW = sum_n dy[n] (c_out x P) * col(x[n])^T (P x K)`, `db = sum dy`.
//!
//! Stride-1 "same" convolutions with enough channels skip the GEMMs: [`rows`] (rows of at least
//! 16 columns, output positions in the SIMD lanes) or [`direct`] (smaller planes, output
//! channels in the lanes) runs them and their input gradient (as the convolution of the output
//! gradient with the rotated kernel), and [`weight`] their weight gradient (which needs enough
//! output channels only), as register-blocked fused multiply-adds over the terms that read
//! inside the input only.
//!
//! A 1x1 convolution at stride 1 without padding needs no im2col: `col(x[n])` is `x[n]`. At
//! stride 1 with as many output as input columns, each im2col row is a masked copy of a padded
//! input plane read from a constant offset, and col2im adds it back the same way ([`Shifts`]);
//! other shapes use a lookup table (small planes) or copy runs line by line. With fewer than 64
//! positions per image, a chunk's images form one product instead, their columns side by side.
//! Work is split into chunks of whole images whose size depends only on the shape; chunks run
//! on the rayon pool and the weight gradient's per-chunk sums (column-major when the products
//! are deep) are added in chunk order, so the result is bit-identical for every thread count.
//! Column and staging buffers are per thread and reused.

mod direct;
mod rows;
mod weight;

use std::cell::RefCell;

use rayon::prelude::*;

use self::direct::{Direct, PerImage};
use self::rows::Rows;
use self::weight::WeightGrad;

use crate::error::{Error, Kernel, check_len};
use crate::raw::{MatMut, MatRef, Out, matmul};
pub use crate::shape::Conv2d;
use crate::simd::vectorized;

/// Target columns (`images * P`) of one chunk: enough work per task to amortise its GEMMs'
/// packing, small enough that a batch of 32 still splits into several tasks.
const CHUNK_COLUMNS: usize = 2048;
/// A batch splits into at least this many chunks when it has that many images.
const MIN_CHUNKS: usize = 4;
/// Where [`Shifts`] do not apply (stride 2, fewer output than input columns): up to this many
/// output positions per image, im2col looks each entry's input position up in a table built
/// once per call ([`Taps::table`]), and col2im up to [`SCATTER_POSITIONS`]; above, they copy
/// (add) whole runs, which vectorises. Measured on 3x3 kernels before shifts replaced both at
/// stride 1: the table was 1.3-2.3x faster for im2col at 2x2 to 8x8 planes and slower at
/// 16x16; for col2im 1.2-1.7x faster at 2x2 and 4x4 and 1.4x slower at 8x8.
const TABLE_POSITIONS: usize = 64;
/// See [`TABLE_POSITIONS`].
const SCATTER_POSITIONS: usize = 32;
/// Below this many output positions per image, a chunk's images are one product with their
/// columns side by side (a per-image product this thin wastes most of each GEMM tile).
const SIDE_BY_SIDE_BELOW: usize = 64;

/// Where the rows of the column matrix read in an input plane, one entry per kernel offset
/// (`ky * kw + kx`), the same for every channel.
struct Taps {
    /// `P` input positions per kernel offset, `usize::MAX` where the entry lies on padding:
    /// for planes of at most [`TABLE_POSITIONS`] outputs.
    table: Option<Vec<usize>>,
    /// The run geometry per kernel offset.
    runs: Vec<Run>,
    /// The masked shifts, where the shape allows them.
    shifts: Option<Shifts>,
}

/// At stride 1 with as many output as input columns, output `d` of kernel offset `t` reads
/// input `d + offsets[t] - margin`: row `t` of the column matrix is a copy of the plane placed
/// `margin` zeros into a longer buffer, read from `offsets[t]` on, with the entries that lie on
/// padding (or that wrap round from a neighbouring row) masked to zero. A masked copy of a
/// whole row is one vectorised loop at every plane size, where a lookup table gathers one
/// value at a time and runs copy a few values per call.
struct Shifts {
    /// Zeros before the plane in the padded copy.
    margin: usize,
    /// Length of the padded copy: the plane and every offset's reads fit.
    padded: usize,
    /// Where each kernel offset's row starts in the padded copy.
    offsets: Vec<usize>,
    /// `kh * kw` rows of `P` flags: whether the entry reads inside the input.
    keep: Vec<bool>,
}

/// One kernel offset's rows as runs of input.
struct Run {
    /// Output rows `[y.0, y.1)` and columns `[x.0, x.1)` that read inside the input.
    y: (usize, usize),
    x: (usize, usize),
    /// Input position read by output `(y.0, x.0)` (0 when none is read).
    from: usize,
}

/// A direct kernel planned for one direction of a shape: output positions in the SIMD lanes
/// ([`Rows`], for rows of at least 16 columns) or output channels ([`Direct`], for smaller
/// planes).
enum Planned {
    Rows(Rows),
    Channels(Direct),
}

impl Planned {
    /// `rows` where it applies, else `channels()` where that does.
    fn pick(rows: Option<Rows>, channels: impl FnOnce() -> Option<Direct>) -> Option<Self> {
        rows.map(Self::Rows).or_else(|| channels().map(Self::Channels))
    }

    /// Values of the padded copy of one image.
    fn padded_len(&self) -> usize {
        match self {
            Self::Channels(d) => d.padded_len(),
            Self::Rows(r) => r.padded_len(),
        }
    }

    /// Convolves one image `x` into `y`; `padded` is scratch of [`Self::padded_len`] values.
    fn image(&self, x: &[f32], y: &mut [f32], padded: &mut [f32]) {
        match self {
            Self::Channels(d) => d.image(x, y, padded),
            Self::Rows(r) => r.image(x, y, padded),
        }
    }
}

thread_local! {
    /// This thread's im2col buffer, grown on demand and reused by every later call.
    static COLUMNS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

thread_local! {
    /// The weight gradient's per-chunk sums of calls made on this thread, reused.
    static PARTIALS: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

thread_local! {
    /// This thread's buffer for a chunk's outputs or output gradients side by side, reused.
    static STAGING: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `buffer` (this thread's), grown to at least `len`.
fn with_buffer<R>(buffer: &'static std::thread::LocalKey<RefCell<Vec<f32>>>, len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    buffer.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() < len {
            c.resize(len, 0.0);
        }
        f(&mut c[..len])
    })
}

/// Runs `f` on this thread's column buffer, at least `len` long.
fn with_columns<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    with_buffer(&COLUMNS, len, f)
}

/// Runs `f` on this thread's column buffer (`cols`) and staging buffer (`staged`).
fn with_wide<R>(cols: usize, staged: usize, f: impl FnOnce(&mut [f32], &mut [f32]) -> R) -> R {
    with_buffer(&COLUMNS, cols, |c| with_buffer(&STAGING, staged, |s| f(c, s)))
}

impl Conv2d {
    /// Output height and width.
    pub fn out_hw(&self) -> [usize; 2] {
        let out = |size: usize, i: usize| (size + 2 * self.padding[i] - self.dilation[i] * (self.kernel[i] - 1) - 1) / self.stride[i] + 1;
        [out(self.h, 0), out(self.w, 1)]
    }

    /// Rows of the column matrix: `c_in * kh * kw`.
    pub fn k(&self) -> usize {
        self.c_in * self.kernel[0] * self.kernel[1]
    }

    /// Output positions per image and channel.
    pub fn p(&self) -> usize {
        let [oh, ow] = self.out_hw();
        oh * ow
    }

    /// Values of the input, weight and output.
    pub fn lens(&self) -> (usize, usize, usize) {
        (self.batch * self.c_in * self.h * self.w, self.c_out * self.k(), self.batch * self.c_out * self.p())
    }

    /// Checks that the shape describes a convolution these kernels run.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |why| Err(Error::Shape(Box::new(*self), why));
        if self.stride.contains(&0) || self.dilation.contains(&0) {
            return bad("stride and dilation must be at least 1");
        }
        if self.kernel.contains(&0) || self.c_in == 0 || self.c_out == 0 {
            return bad("empty kernel");
        }
        for (i, size) in [self.h, self.w].into_iter().enumerate() {
            if size + 2 * self.padding[i] < self.dilation[i] * (self.kernel[i] - 1) + 1 {
                return bad("kernel larger than the padded input");
            }
        }
        Ok(())
    }

    fn check(&self, name: &'static str, got: usize, want: usize) -> Result<(), Error> {
        check_len(|| Kernel::Conv(Box::new(*self)), name, got, want)
    }

    /// A 1x1 kernel at stride 1 without padding: the input is its own column matrix.
    fn pointwise(&self) -> bool {
        self.kernel == [1, 1] && self.stride == [1, 1] && self.padding == [0, 0]
    }

    /// Whether a chunk's images form one product, columns side by side.
    fn side_by_side(&self) -> bool {
        self.p() < SIDE_BY_SIDE_BELOW
    }

    /// Copies the output gradients of `images` (each `c_out x P`) into `wide`
    /// (`c_out x (images * P)`), side by side.
    fn stage(&self, dy: &[f32], images: std::ops::Range<usize>, wide: &mut [f32]) {
        let (p, ld) = (self.p(), images.len() * self.p());
        for (i, n) in images.enumerate() {
            let image = &dy[n * self.c_out * p..][..self.c_out * p];
            for (row, plane) in wide.chunks_exact_mut(ld).zip(image.chunks_exact(p)) {
                row[i * p..][..p].copy_from_slice(plane);
            }
        }
    }

    /// Images per chunk (depends on the shape only).
    fn chunk(&self) -> usize {
        let by_work = CHUNK_COLUMNS.div_ceil(self.p().max(1));
        let by_split = self.batch.div_ceil(MIN_CHUNKS);
        by_work.min(by_split).max(1)
    }

    /// The images of chunk `c`.
    fn chunk_images(&self, c: usize) -> std::ops::Range<usize> {
        c * self.chunk()..((c + 1) * self.chunk()).min(self.batch)
    }

    /// Where each kernel offset's row of the column matrix reads in an input plane: computed
    /// once per call, so that the per-row work of im2col/col2im is a copy and not index
    /// arithmetic (which, at 2x2 and 4x4 planes, cost more than the GEMM it feeds).
    fn taps(&self) -> Taps {
        let [oh, ow] = self.out_hw();
        let shifts = self.shifts();
        let table = (shifts.is_none() && self.p() <= TABLE_POSITIONS).then(|| {
            let tap = |(ky, kx)| {
                // An index past every plane for padding: the copy reads it as zero.
                self.positions(ky, kx).map(
                    move |(oy, ox, inside)| {
                        if inside { self.first(0, oy, ky) * self.w + self.first(1, ox, kx) } else { usize::MAX }
                    },
                )
            };
            self.offsets().flat_map(tap).collect()
        });
        let runs = self
            .offsets()
            .map(|(ky, kx)| {
                let (y, x) = (self.inside(0, ky, oh), self.inside(1, kx, ow));
                let reads = y.0 < y.1 && x.0 < x.1;
                let from = if reads { self.first(0, y.0, ky) * self.w + self.first(1, x.0, kx) } else { 0 };
                Run { y, x, from }
            })
            .collect();
        Taps { table, runs, shifts }
    }

    /// [`Shifts`] for stride-1 shapes whose output is as wide as the input.
    fn shifts(&self) -> Option<Shifts> {
        let [_, ow] = self.out_hw();
        if self.stride != [1, 1] || ow != self.w {
            return None;
        }
        let margin = self.padding[0] * self.w + self.padding[1];
        let offsets: Vec<usize> = self.offsets().map(|(ky, kx)| ky * self.dilation[0] * self.w + kx * self.dilation[1]).collect();
        let keep = self.offsets().flat_map(|(ky, kx)| self.positions(ky, kx).map(|(_, _, inside)| inside)).collect();
        let padded = (margin + self.h * self.w).max(self.p() + offsets.iter().max().copied().unwrap_or(0));
        Some(Shifts { margin, padded, offsets, keep })
    }

    /// Fills the `K x P` matrix at the start of `col`, rows `ld` apart, with the patches of one
    /// image `x` (`c_in x h x w`); `taps` is [`Self::taps`].
    fn im2col(&self, taps: &Taps, x: &[f32], col: &mut [f32], ld: usize) {
        let [oh, ow] = self.out_hw();
        let (p, hw, s, kk) = (oh * ow, self.h * self.w, self.stride[1], self.kernel[0] * self.kernel[1]);
        let mut rows = col.chunks_mut(ld).take(self.k()).map(|row| &mut row[..p]);
        if let Some(sh) = &taps.shifts {
            let mut padded = vec![0.0; sh.padded];
            vectorized(
                #[inline(always)]
                || {
                    for plane in x.chunks_exact(hw).take(self.c_in) {
                        padded[sh.margin..][..hw].copy_from_slice(plane);
                        for ((dst, &off), keep) in rows.by_ref().take(kk).zip(&sh.offsets).zip(sh.keep.chunks_exact(p)) {
                            let src = &padded[off..][..p];
                            dst.iter_mut().zip(src).zip(keep).for_each(|((d, &v), &k)| *d = if k { v } else { 0.0 });
                        }
                    }
                },
            );
            return;
        }
        vectorized(
            #[inline(always)]
            || {
                for plane in x.chunks_exact(hw).take(self.c_in) {
                    match &taps.table {
                        Some(table) => {
                            for (dst, tap) in rows.by_ref().take(kk).zip(table.chunks_exact(p)) {
                                dst.iter_mut().zip(tap).for_each(|(d, &i)| *d = plane.get(i).copied().unwrap_or(0.0));
                            }
                        }
                        None => {
                            for (dst, run) in rows.by_ref().take(kk).zip(&taps.runs) {
                                let ((ylo, yhi), (xlo, xhi)) = (run.y, run.x);
                                if xlo == xhi || ylo == yhi {
                                    dst.fill(0.0);
                                    continue;
                                }
                                dst[..ylo * ow].fill(0.0);
                                dst[yhi * ow..].fill(0.0);
                                let step = self.stride[0] * self.w;
                                for (oy, line) in dst.chunks_exact_mut(ow).enumerate().take(yhi).skip(ylo) {
                                    line[..xlo].fill(0.0);
                                    line[xhi..].fill(0.0);
                                    let src = &plane[run.from + (oy - ylo) * step..];
                                    let line = &mut line[xlo..xhi];
                                    if s == 1 {
                                        line.copy_from_slice(&src[..line.len()]);
                                    } else {
                                        line.iter_mut().zip(src.iter().step_by(s)).for_each(|(d, v)| *d = *v);
                                    }
                                }
                            }
                        }
                    }
                }
            },
        );
    }

    /// Adds the `K x P` matrix at the start of `col`, rows `ld` apart, back onto one image's
    /// gradient `dx` (`c_in x h x w`), which the caller zeroed; `taps` is [`Self::taps`].
    /// `col` is scratch: the entries that fall on padding are zeroed.
    fn col2im(&self, taps: &Taps, col: &mut [f32], ld: usize, dx: &mut [f32]) {
        let [oh, ow] = self.out_hw();
        let (p, hw, s, kk) = (oh * ow, self.h * self.w, self.stride[1], self.kernel[0] * self.kernel[1]);
        let mut rows = col.chunks_mut(ld).take(self.k()).map(|row| &mut row[..p]);
        if let Some(sh) = &taps.shifts {
            // The kernel offsets' rows are added in order into a zeroed padded plane (a masked
            // entry adds +0.0, which changes no sum that starts at +0.0), then onto `dx`.
            let mut padded = vec![0.0; sh.padded];
            vectorized(
                #[inline(always)]
                || {
                    for plane in dx.chunks_exact_mut(hw).take(self.c_in) {
                        padded.fill(0.0);
                        for ((src, &off), keep) in rows.by_ref().take(kk).zip(&sh.offsets).zip(sh.keep.chunks_exact(p)) {
                            let dst = &mut padded[off..][..p];
                            dst.iter_mut().zip(&*src).zip(keep).for_each(|((d, &v), &k)| *d += if k { v } else { 0.0 });
                        }
                        plane.iter_mut().zip(&padded[sh.margin..][..hw]).for_each(|(d, &v)| *d += v);
                    }
                },
            );
            return;
        }
        vectorized(
            #[inline(always)]
            || {
                for plane in dx.chunks_exact_mut(hw).take(self.c_in) {
                    match taps.table.as_ref().filter(|_| p <= SCATTER_POSITIONS) {
                        Some(table) => {
                            for (src, tap) in rows.by_ref().take(kk).zip(table.chunks_exact(p)) {
                                src.iter().zip(tap).for_each(|(v, &i)| {
                                    if let Some(d) = plane.get_mut(i) {
                                        *d += *v;
                                    }
                                });
                            }
                        }
                        None => {
                            for (src, run) in rows.by_ref().take(kk).zip(&taps.runs) {
                                let ((ylo, yhi), (xlo, xhi)) = (run.y, run.x);
                                if xlo == xhi || ylo == yhi {
                                    continue;
                                }
                                let step = self.stride[0] * self.w;
                                for (oy, line) in src.chunks_exact(ow).enumerate().take(yhi).skip(ylo) {
                                    let dst = &mut plane[run.from + (oy - ylo) * step..];
                                    let line = &line[xlo..xhi];
                                    if s == 1 {
                                        dst[..line.len()].iter_mut().zip(line).for_each(|(d, v)| *d += *v);
                                    } else {
                                        dst.iter_mut().step_by(s).zip(line).for_each(|(d, v)| *d += *v);
                                    }
                                }
                            }
                        }
                    }
                }
            },
        );
    }

    /// The kernel offsets `(ky, kx)`, in the order of the column matrix's rows.
    fn offsets(&self) -> impl Iterator<Item = (usize, usize)> + Clone {
        let [kh, kw] = self.kernel;
        (0..kh).flat_map(move |ky| (0..kw).map(move |kx| (ky, kx)))
    }

    /// Each output position `(oy, ox)` in order, with whether it reads inside the input (not
    /// padding) at kernel offset `(ky, kx)`.
    fn positions(&self, ky: usize, kx: usize) -> impl Iterator<Item = (usize, usize, bool)> {
        let [oh, ow] = self.out_hw();
        let ((ylo, yhi), (xlo, xhi)) = (self.inside(0, ky, oh), self.inside(1, kx, ow));
        (0..oh).flat_map(move |oy| (0..ow).map(move |ox| (oy, ox, (ylo..yhi).contains(&oy) && (xlo..xhi).contains(&ox))))
    }

    /// The output indices `[lo, hi)` along `axis` whose input index at kernel offset `k` is
    /// inside the input (not padding).
    fn inside(&self, axis: usize, k: usize, out: usize) -> (usize, usize) {
        let (s, off, size) = (self.stride[axis], k * self.dilation[axis], [self.h, self.w][axis]);
        let lo = self.padding[axis].saturating_sub(off).div_ceil(s).min(out);
        // Largest o with o * s + off - pad < size.
        let limit = size + self.padding[axis];
        let hi = if limit > off { ((limit - off - 1) / s + 1).min(out) } else { 0 };
        (lo, hi.max(lo))
    }

    /// The input index that output index `o` reads at kernel offset `k` along `axis`; `o` must
    /// lie in [`Self::inside`]'s range.
    fn first(&self, axis: usize, o: usize, k: usize) -> usize {
        o * self.stride[axis] + k * self.dilation[axis] - self.padding[axis]
    }
}

/// The forward pass: `out = conv(x, weight) + bias`.
///
/// # Errors
/// When the shape is invalid or a buffer's length does not match it.
pub fn forward(s: &Conv2d, x: &[f32], weight: &[f32], bias: Option<&[f32]>, out: &mut [f32]) -> Result<(), Error> {
    forward_to(s, x, weight, bias, false, Out::Into(out)).map(drop)
}

/// The forward pass into a new vector, followed by a ReLU (Burn's and PyTorch's: NaN passes)
/// when `relu`.
///
/// # Errors
/// When the shape is invalid or a buffer's length does not match it.
pub fn forward_new(s: &Conv2d, x: &[f32], weight: &[f32], bias: Option<&[f32]>, relu: bool) -> Result<Vec<f32>, Error> {
    forward_to(s, x, weight, bias, relu, Out::New(s.lens().2))
}

fn forward_to(s: &Conv2d, x: &[f32], weight: &[f32], bias: Option<&[f32]>, relu: bool, out: Out<'_>) -> Result<Vec<f32>, Error> {
    s.validate()?;
    let (nx, nw, ny) = s.lens();
    s.check("input", x.len(), nx)?;
    s.check("weight", weight.len(), nw)?;
    s.check("output", out.len(), ny)?;
    if let Some(b) = bias {
        s.check("bias", b.len(), s.c_out)?;
    }
    let taps = s.taps();
    let (k, p, image_in, image_out) = (s.k(), s.p(), s.c_in * s.h * s.w, s.c_out * s.p());
    let w = MatRef::row_major(weight, s.c_out, k);
    // Planes under 64 positions run faster as side-by-side products.
    let direct = if s.side_by_side() { None } else { Planned::pick(Rows::forward(s, weight), || Direct::forward(s, weight)) };
    Ok(out.write(image_out * s.chunk(), |c, ys| {
        let first = c * s.chunk();
        let images = ys.len() / image_out;
        if let Some(d) = &direct {
            with_columns(d.padded_len(), |padded| {
                for (i, y) in ys.chunks_exact_mut(image_out).enumerate() {
                    d.image(&x[(first + i) * image_in..][..image_in], y, padded);
                }
            });
        } else if s.side_by_side() {
            let ld = images * p;
            with_wide(k * ld, s.c_out * ld, |col, wide| {
                for i in 0..images {
                    s.im2col(&taps, &x[(first + i) * image_in..][..image_in], &mut col[i * p..], ld);
                }
                matmul(MatMut::row_major(wide, s.c_out, ld), w, MatRef::row_major(col, k, ld), false);
                for (i, y) in ys.chunks_exact_mut(image_out).enumerate() {
                    for (plane, row) in y.chunks_exact_mut(p).zip(wide.chunks_exact(ld)) {
                        plane.copy_from_slice(&row[i * p..][..p]);
                    }
                }
            });
        } else {
            for (i, y) in ys.chunks_exact_mut(image_out).enumerate() {
                let x = &x[(first + i) * image_in..][..image_in];
                if s.pointwise() {
                    matmul(MatMut::row_major(y, s.c_out, p), w, MatRef::row_major(x, k, p), false);
                } else {
                    with_columns(k * p, |col| {
                        s.im2col(&taps, x, col, p);
                        matmul(MatMut::row_major(y, s.c_out, p), w, MatRef::row_major(col, k, p), false);
                    });
                }
            }
        }
        if bias.is_some() || relu {
            vectorized(
                #[inline(always)]
                || {
                    for y in ys.chunks_exact_mut(image_out) {
                        for (o, plane) in y.chunks_exact_mut(p).enumerate() {
                            let b = bias.map_or(0.0, |b| b[o]);
                            match (bias.is_some(), relu) {
                                (true, false) => plane.iter_mut().for_each(|v| *v += b),
                                (true, true) => plane.iter_mut().for_each(|v| *v = crate::act::relu(*v + b)),
                                _ => plane.iter_mut().for_each(|v| *v = crate::act::relu(*v)),
                            }
                        }
                    }
                },
            );
        }
    }))
}

/// The input gradient: `dx` from the output gradient `dy`.
///
/// # Errors
/// When the shape is invalid or a buffer's length does not match it.
pub fn input_grad(s: &Conv2d, dy: &[f32], weight: &[f32], dx: &mut [f32]) -> Result<(), Error> {
    input_grad_to(s, dy, weight, Out::Into(dx)).map(drop)
}

/// The input gradient into a new vector.
///
/// # Errors
/// When the shape is invalid or a buffer's length does not match it.
pub fn input_grad_new(s: &Conv2d, dy: &[f32], weight: &[f32]) -> Result<Vec<f32>, Error> {
    input_grad_to(s, dy, weight, Out::New(s.lens().0))
}

fn input_grad_to(s: &Conv2d, dy: &[f32], weight: &[f32], dx: Out<'_>) -> Result<Vec<f32>, Error> {
    s.validate()?;
    let (nx, nw, ny) = s.lens();
    s.check("output gradient", dy.len(), ny)?;
    s.check("weight", weight.len(), nw)?;
    s.check("input gradient", dx.len(), nx)?;
    let taps = s.taps();
    let (k, p, image_in, image_out) = (s.k(), s.p(), s.c_in * s.h * s.w, s.c_out * s.p());
    let wt = MatRef::transposed(weight, k, s.c_out);
    let direct = if s.side_by_side() { None } else { Planned::pick(Rows::input_grad(s, weight), || Direct::input_grad(s, weight)) };
    Ok(dx.write(image_in * s.chunk(), |c, dxs| {
        let first = c * s.chunk();
        let images = dxs.len() / image_in;
        if let Some(d) = &direct {
            with_columns(d.padded_len(), |padded| {
                for (i, dx) in dxs.chunks_exact_mut(image_in).enumerate() {
                    d.image(&dy[(first + i) * image_out..][..image_out], dx, padded);
                }
            });
            return;
        }
        if s.side_by_side() {
            let ld = images * p;
            with_wide(k * ld, s.c_out * ld, |col, wide| {
                s.stage(dy, first..first + images, wide);
                matmul(MatMut::row_major(col, k, ld), wt, MatRef::row_major(wide, s.c_out, ld), false);
                for (i, dx) in dxs.chunks_exact_mut(image_in).enumerate() {
                    dx.fill(0.0);
                    s.col2im(&taps, &mut col[i * p..], ld, dx);
                }
            });
            return;
        }
        for (i, dx) in dxs.chunks_exact_mut(image_in).enumerate() {
            let dy = MatRef::row_major(&dy[(first + i) * image_out..][..image_out], s.c_out, p);
            if s.pointwise() {
                matmul(MatMut::row_major(dx, k, p), wt, dy, false);
            } else {
                with_columns(k * p, |col| {
                    matmul(MatMut::row_major(col, k, p), wt, dy, false);
                    dx.fill(0.0);
                    s.col2im(&taps, col, p, dx);
                });
            }
        }
    }))
}

/// Chunk `c`'s weight gradient into `acc`: its images' products summed (or, side by side, their
/// one product), as `dW^T` (`K x c_out`, column-major) when `transposed`.
fn chunk_weight_grad(s: &Conv2d, taps: &Taps, x: &[f32], dy: &[f32], c: usize, acc: &mut [f32], transposed: bool) {
    let (k, p, image_in, image_out) = (s.k(), s.p(), s.c_in * s.h * s.w, s.c_out * s.p());
    let images = s.chunk_images(c);
    if s.side_by_side() {
        let ld = images.len() * p;
        with_wide(k * ld, s.c_out * ld, |col, wide| {
            for (i, n) in images.clone().enumerate() {
                s.im2col(taps, &x[n * image_in..][..image_in], &mut col[i * p..], ld);
            }
            s.stage(dy, images, wide);
            matmul(weight_view(acc, s.c_out, k, transposed), MatRef::row_major(wide, s.c_out, ld), MatRef::transposed(col, ld, k), false);
        });
        return;
    }
    for (i, n) in images.enumerate() {
        let x = &x[n * image_in..][..image_in];
        let dy = MatRef::row_major(&dy[n * image_out..][..image_out], s.c_out, p);
        if s.pointwise() {
            matmul(weight_view(acc, s.c_out, k, transposed), dy, MatRef::transposed(x, p, k), i > 0);
        } else {
            with_columns(k * p, |col| {
                s.im2col(taps, x, col, p);
                matmul(weight_view(acc, s.c_out, k, transposed), dy, MatRef::transposed(col, p, k), i > 0);
            });
        }
    }
}

/// A `rows x cols` view of a weight-gradient sum, row-major or column-major.
fn weight_view(acc: &mut [f32], rows: usize, cols: usize, column_major: bool) -> MatMut<'_> {
    if column_major { MatMut::strided(acc, rows, cols, 1, rows) } else { MatMut::row_major(acc, rows, cols) }
}

/// The weight gradient `dw` (`c_out x c_in x kh x kw`) and, when asked, the bias gradient `db`.
///
/// # Errors
/// When the shape is invalid or a buffer's length does not match it.
pub fn weight_grad(s: &Conv2d, x: &[f32], dy: &[f32], dw: &mut [f32], db: Option<&mut [f32]>) -> Result<(), Error> {
    s.validate()?;
    let (nx, nw, ny) = s.lens();
    s.check("input", x.len(), nx)?;
    s.check("output gradient", dy.len(), ny)?;
    s.check("weight gradient", dw.len(), nw)?;
    let taps = s.taps();
    let (k, p) = (s.k(), s.p());
    let chunks = s.batch.div_ceil(s.chunk());
    // Each chunk sums its images' products (or, side by side, computes their one product)
    // into a reused partial buffer. When the products are deep (>= 64 positions), the `gemm`
    // crate runs them 1.2-2.5x faster into a column-major destination, so the chunk sums
    // `dW^T` (`K x c_out`) there; shallower products stay row-major.
    // The direct kernel ([`weight`]) sums `dW^T` with its rows rounded up to whole SIMD
    // vectors.
    let transposed = if s.side_by_side() { s.chunk() * p } else { p } >= 64;
    let direct = if s.side_by_side() { None } else { WeightGrad::new(s) };
    let (len, ld) = direct.as_ref().map_or((nw, s.c_out), |g| (g.len(), g.width()));
    let (image_in, image_out) = (s.c_in * s.h * s.w, s.c_out * p);
    let chunk = |c: usize, b: &mut [f32]| match &direct {
        Some(g) => {
            let images = s.chunk_images(c);
            let (x, dy) = (&x[images.start * image_in..images.end * image_in], &dy[images.start * image_out..images.end * image_out]);
            with_columns(g.scratch_len(), |scratch| g.chunk(x, dy, b, scratch));
        }
        None => chunk_weight_grad(s, &taps, x, dy, c, b, transposed),
    };
    // The chunks' sums are added in chunk order (into the first's buffer, in its layout), then
    // written to dw.
    PARTIALS.with(|buffers| {
        let mut buffers = buffers.borrow_mut();
        if buffers.len() < chunks {
            buffers.resize_with(chunks, Vec::new);
        }
        for b in &mut buffers[..chunks] {
            if b.len() < len {
                b.resize(len, 0.0);
            }
        }
        let partials = &mut buffers[..chunks];
        partials.par_iter_mut().enumerate().for_each(|(c, b)| chunk(c, &mut b[..len]));
        let Some((sum, rest)) = partials.split_first_mut() else { return };
        let sum = &mut sum[..len];
        vectorized(
            #[inline(always)]
            || {
                for b in rest.iter() {
                    sum.iter_mut().zip(&b[..len]).for_each(|(d, v)| *d += v);
                }
            },
        );
        if transposed || direct.is_some() {
            for (j, column) in sum.chunks_exact(ld).enumerate() {
                for (o, v) in column[..s.c_out].iter().enumerate() {
                    dw[o * k + j] = *v;
                }
            }
        } else {
            dw.copy_from_slice(sum);
        }
    });
    if let Some(db) = db {
        s.check("bias gradient", db.len(), s.c_out)?;
        db.copy_from_slice(&bias_grad(s, dy)?);
    }
    Ok(())
}

/// The bias gradient: per output channel, the sum of `dy` over its positions, image by image
/// (each image's plane summed, the images' sums added in order), threaded over channels.
///
/// # Errors
/// When `dy`'s length does not match the shape.
pub fn bias_grad(s: &Conv2d, dy: &[f32]) -> Result<Vec<f32>, Error> {
    s.check("output gradient", dy.len(), s.lens().2)?;
    Ok(channel_sums(dy, s.c_out, s.p()))
}

/// Per channel of an NCHW tensor `t` (`plane = H * W`), the sum of its values, each image's
/// plane summed and the images' sums added in order, threaded over channels. A trailing
/// partial image is ignored.
pub fn channel_sums(t: &[f32], channels: usize, plane: usize) -> Vec<f32> {
    let image = channels * plane;
    if image == 0 {
        return vec![0.0; channels];
    }
    (0..channels)
        .into_par_iter()
        .map(|c| t.chunks_exact(image).map(|im| im[c * plane..][..plane].iter().sum::<f32>()).fold(0.0, |d, v| d + v))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A direct convolution in f64 (the definition), for forward and both gradients.
    pub(super) struct Naive<'a>(pub(super) &'a Conv2d);

    impl Naive<'_> {
        /// Calls `f(n, co, ci, oy, ox, iy, ix, ky, kx)` for every term of the sum.
        fn each(&self, mut f: impl FnMut([usize; 9])) {
            let s = self.0;
            let [oh, ow] = s.out_hw();
            // The input index output `o` reads at kernel offset `k`, unless it is padding.
            let source = |o: usize, k: usize, axis: usize, size: usize| {
                (o * s.stride[axis] + k * s.dilation[axis]).checked_sub(s.padding[axis]).filter(|&i| i < size)
            };
            for n in 0..s.batch {
                for co in 0..s.c_out {
                    for ci in 0..s.c_in {
                        for oy in 0..oh {
                            for ox in 0..ow {
                                for ky in 0..s.kernel[0] {
                                    for kx in 0..s.kernel[1] {
                                        if let (Some(iy), Some(ix)) = (source(oy, ky, 0, s.h), source(ox, kx, 1, s.w)) {
                                            f([n, co, ci, oy, ox, iy, ix, ky, kx]);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }

        pub(super) fn all(&self, x: &[f32], w: &[f32], dy: &[f32]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
            let s = self.0;
            let (nx, nw, ny) = s.lens();
            let [oh, ow] = s.out_hw();
            let (mut y, mut dx, mut dw) = (vec![0f64; ny], vec![0f64; nx], vec![0f64; nw]);
            self.each(|[n, co, ci, oy, ox, iy, ix, ky, kx]| {
                let xi = ((n * s.c_in + ci) * s.h + iy) * s.w + ix;
                let wi = ((co * s.c_in + ci) * s.kernel[0] + ky) * s.kernel[1] + kx;
                let yi = ((n * s.c_out + co) * oh + oy) * ow + ox;
                y[yi] += f64::from(x[xi]) * f64::from(w[wi]);
                dx[xi] += f64::from(dy[yi]) * f64::from(w[wi]);
                dw[wi] += f64::from(dy[yi]) * f64::from(x[xi]);
            });
            (y, dx, dw)
        }
    }

    fn values(n: usize, salt: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + salt) * 0.618_034).fract() - 0.5).collect()
    }

    pub(super) fn close(got: &[f32], want: &[f64], what: &str, s: &Conv2d) {
        let scale = want.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((f64::from(*g) - w).abs() <= 1e-5 * scale.max(w.abs()) * 10.0, "{what} [{i}]: {g} vs {w} ({s:?})");
        }
    }

    /// `[batch, c_in, c_out]`, `[h, w]`, kernel, `[stride, dilation]`, padding.
    fn shape(
        [batch, c_in, c_out]: [usize; 3],
        [h, w]: [usize; 2],
        kernel: [usize; 2],
        [stride, dilation]: [usize; 2],
        padding: [usize; 2],
    ) -> Conv2d {
        Conv2d { batch, c_in, h, w, c_out, kernel, stride: [stride, stride], padding, dilation: [dilation, dilation] }
    }

    /// Odd shapes: batch 1, non-square input and kernel, stride 2, padding, dilation, 1x1,
    /// channels that are no multiple of a SIMD width, batches that split unevenly, per-image
    /// products (`P` >= 64: the 8x8 5x5 padding 2, the 9x8 1x1 and the last four shapes) and
    /// side-by-side ones (the others), weight gradients summed column-major and row-major;
    /// im2col/col2im by masked shifts (stride 1, as many output as input columns), else im2col
    /// by table (`P` <= 64) and by runs, col2im by table (`P` <= 32) and by runs.
    fn shapes() -> Vec<Conv2d> {
        vec![
            shape([1, 3, 5], [7, 5], [3, 3], [1, 1], [1, 1]),
            shape([3, 5, 7], [9, 6], [3, 2], [2, 1], [1, 0]),
            shape([5, 2, 3], [8, 8], [5, 5], [1, 1], [2, 2]),
            shape([2, 4, 3], [6, 7], [3, 3], [1, 2], [2, 1]),
            shape([6, 9, 11], [5, 5], [1, 1], [1, 1], [0, 0]),
            shape([4, 6, 5], [7, 7], [1, 1], [2, 1], [0, 0]),
            shape([7, 3, 4], [11, 11], [3, 3], [2, 1], [1, 1]),
            shape([2, 3, 2], [13, 10], [4, 3], [3, 1], [0, 2]),
            // Stride 1 with as many output as input columns (one shifted span per kernel
            // offset): dilated, and padded along the columns only.
            shape([2, 3, 4], [6, 9], [3, 3], [1, 2], [2, 2]),
            shape([3, 2, 5], [7, 4], [3, 3], [1, 1], [0, 1]),
            // A 1x1 convolution with enough positions for per-image products.
            shape([2, 3, 4], [9, 8], [1, 1], [1, 1], [0, 0]),
            // More than TABLE_POSITIONS outputs, so im2col/col2im copy runs line by line:
            // stride 2 with padding, and dilation with fewer output than input columns.
            shape([2, 3, 4], [19, 17], [3, 3], [2, 1], [1, 1]),
            shape([2, 2, 3], [14, 12], [3, 3], [1, 2], [1, 0]),
            // Masked shifts with more than TABLE_POSITIONS outputs: "same" padding, dilated.
            shape([2, 3, 4], [12, 11], [3, 3], [1, 1], [1, 1]),
            shape([2, 2, 3], [10, 9], [3, 3], [1, 2], [2, 2]),
            // The direct kernels ("same" padding, stride 1, at least 64 positions, at least 16
            // input and 32 output channels), forward and both gradients: channels that fill
            // no whole SIMD vector, a non-square kernel, channel blocks of four vectors and
            // one; the input gradient of the first by im2col (20 channels into the input).
            shape([2, 20, 36], [8, 8], [3, 3], [1, 1], [1, 1]),
            shape([2, 33, 37], [9, 8], [3, 5], [1, 1], [1, 2]),
            shape([3, 40, 34], [8, 9], [3, 3], [1, 1], [1, 1]),
            shape([2, 32, 70], [8, 8], [3, 3], [1, 1], [1, 1]),
            // The direct weight gradient of few input channels (a first layer; its forward
            // pass and input gradient by im2col): a partial vector, a non-square kernel.
            shape([2, 3, 33], [9, 8], [5, 3], [1, 1], [2, 1]),
            shape([2, 7, 32], [8, 8], [3, 3], [1, 1], [1, 1]),
            // The direct kernels with positions in the lanes (rows of at least 16 columns, at
            // least 8 output channels), forward and input gradient: rows that are no whole
            // number of vectors, channel groups of 16 and 8 (40 and 12 channels), few input
            // channels (5; the input gradient into them by im2col), the widest kernel.
            shape([2, 5, 12], [5, 17], [3, 5], [1, 1], [1, 2]),
            shape([2, 12, 40], [4, 33], [3, 3], [1, 1], [1, 1]),
            shape([2, 9, 8], [4, 16], [1, 7], [1, 1], [0, 3]),
        ]
    }

    fn run(s: &Conv2d) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let (nx, nw, ny) = s.lens();
        let (x, w, b, dy) = (values(nx, 0.1), values(nw, 0.7), values(s.c_out, 0.3), values(ny, 0.9));
        let (mut y, mut dx, mut dw, mut db) = (vec![f32::NAN; ny], vec![f32::NAN; nx], vec![f32::NAN; nw], vec![f32::NAN; s.c_out]);
        forward(s, &x, &w, Some(&b), &mut y).unwrap();
        input_grad(s, &dy, &w, &mut dx).unwrap();
        weight_grad(s, &x, &dy, &mut dw, Some(&mut db)).unwrap();
        (y, dx, dw, db)
    }

    #[test]
    fn forward_and_both_gradients_equal_the_definition_on_odd_shapes() {
        for s in shapes() {
            let (nx, nw, ny) = s.lens();
            let (x, w, b, dy) = (values(nx, 0.1), values(nw, 0.7), values(s.c_out, 0.3), values(ny, 0.9));
            let (mut y_ref, dx_ref, dw_ref) = Naive(&s).all(&x, &w, &dy);
            let p = s.p();
            for (i, v) in y_ref.iter_mut().enumerate() {
                *v += f64::from(b[i / p % s.c_out]);
            }
            let mut db_ref = vec![0f64; s.c_out];
            for (i, v) in dy.iter().enumerate() {
                db_ref[i / p % s.c_out] += f64::from(*v);
            }
            let (y, dx, dw, db) = run(&s);
            close(&y, &y_ref, "forward", &s);
            close(&dx, &dx_ref, "input gradient", &s);
            close(&dw, &dw_ref, "weight gradient", &s);
            close(&db, &db_ref, "bias gradient", &s);
        }
    }

    /// An infinity on a plane's first or last column reaches the outputs (and input-gradient
    /// entries, and weight-gradient taps) that read it and nothing else: the masked shifts'
    /// padded copy places it next to the neighbouring row's far column, which reads padding
    /// there (a mask applied by multiplication would give NaN).
    #[test]
    fn a_value_on_a_planes_edge_reaches_only_what_reads_it() {
        for (k, hw) in [(3, 6), (5, 6), (3, 12), (5, 12)] {
            let pad = k / 2;
            let s = shape([1, 1, 1], [hw, hw], [k, k], [1, 1], [pad, pad]);
            for at in [(2, 0), (2, hw - 1), (0, hw - 1), (hw - 1, 0)] {
                let mut x = vec![0.0; hw * hw];
                x[at.0 * hw + at.1] = f32::INFINITY;
                let ones = vec![1.0; k * k];
                let (mut y, mut dx, mut dw) = (vec![f32::NAN; hw * hw], vec![f32::NAN; hw * hw], vec![f32::NAN; k * k]);
                forward(&s, &x, &ones, None, &mut y).unwrap();
                input_grad(&s, &x, &ones, &mut dx).unwrap();
                weight_grad(&s, &x, &vec![1.0; hw * hw], &mut dw, None).unwrap();
                let near = |i: usize, j: usize| i.abs_diff(at.0) <= pad && j.abs_diff(at.1) <= pad;
                let want = |reads: bool| if reads { f32::INFINITY } else { 0.0 };
                for (i, j) in (0..hw).flat_map(|i| (0..hw).map(move |j| (i, j))) {
                    assert_eq!(y[i * hw + j], want(near(i, j)), "output ({i}, {j}), infinity at {at:?}, {s:?}");
                    assert_eq!(dx[i * hw + j], want(near(i, j)), "input gradient ({i}, {j}), infinity at {at:?}, {s:?}");
                }
                // Tap (ky, kx) reads the infinity from output (at.0 + pad - ky, at.1 + pad - kx).
                let read = |a: usize, t: usize| (a + pad).checked_sub(t).is_some_and(|o| o < hw);
                for (ky, kx) in (0..k).flat_map(|ky| (0..k).map(move |kx| (ky, kx))) {
                    assert_eq!(dw[ky * k + kx], want(read(at.0, ky) && read(at.1, kx)), "tap ({ky}, {kx}), infinity at {at:?}, {s:?}");
                }
            }
        }
    }

    /// An infinite weight reaches the outputs whose tap reads inside the input, and no other:
    /// the direct kernels (channels in the lanes at 8x8, positions at 16x16, few output
    /// channels too) never multiply padding (im2col multiplied it, giving NaN where the tap
    /// read padding; PyTorch 2.9.0's convolutions give the finite sum at batch 2 and up). The
    /// input gradient likewise.
    #[test]
    fn an_infinite_weight_never_meets_padding() {
        for (c, n) in [(40, 8), (40, 16), (12, 16)] {
            let s = shape([1, c, c], [n, n], [3, 3], [1, 1], [1, 1]);
            let (nx, nw, ny) = s.lens();
            let mut w = vec![1.0; nw];
            // Output channel 1, input channel 2, tap (0, 2): reads input (oy - 1, ox + 1).
            w[(c + 2) * 9 + 2] = f32::INFINITY;
            let (x, dy) = (vec![1.0; nx], vec![1.0; ny]);
            let (mut y, mut dx) = (vec![f32::NAN; ny], vec![f32::NAN; nx]);
            forward(&s, &x, &w, None, &mut y).unwrap();
            input_grad(&s, &dy, &w, &mut dx).unwrap();
            // Taps inside the input, per position, times `c` channels.
            let inside = |oy: usize, ox: usize| ((oy.min(1) + 1 + (n - 1 - oy).min(1)) * (ox.min(1) + 1 + (n - 1 - ox).min(1)) * c) as f32;
            for (oy, ox) in (0..n).flat_map(|oy| (0..n).map(move |ox| (oy, ox))) {
                let at = oy * n + ox;
                let reads = oy >= 1 && ox < n - 1;
                let want = if reads { f32::INFINITY } else { inside(oy, ox) };
                assert_eq!(y[n * n + at], want, "output channel 1 at ({oy}, {ox}), {s:?}");
                assert_eq!(y[at], inside(oy, ox), "output channel 0 at ({oy}, {ox}), {s:?}");
                // Input (iy, ix) of channel 2 takes the weight from output (iy + 1, ix - 1).
                let read_by = oy < n - 1 && ox >= 1;
                let want = if read_by { f32::INFINITY } else { inside(oy, ox) };
                assert_eq!(dx[2 * n * n + at], want, "input gradient channel 2 at ({oy}, {ox}), {s:?}");
            }
        }
    }

    /// An infinite output gradient reaches the weight-gradient taps that read inside the input
    /// from its position, and no other (im2col multiplied it by the padding: NaN), with as few
    /// input channels as a first layer's too.
    #[test]
    fn an_infinite_output_gradient_never_meets_padding() {
        for c_in in [40, 3] {
            let s = shape([2, c_in, 40], [8, 8], [3, 3], [1, 1], [1, 1]);
            let (nx, nw, ny) = s.lens();
            let mut dy = vec![1.0; ny];
            // Image 1, output channel 1, position (0, 0): tap (ky, kx) reads input (ky - 1, kx - 1).
            dy[(40 + 1) * 64] = f32::INFINITY;
            let mut dw = vec![f32::NAN; nw];
            weight_grad(&s, &vec![1.0; nx], &dy, &mut dw, None).unwrap();
            // Positions whose tap reads inside, per image, times two images.
            let inside = |k: usize| if k == 1 { 8 } else { 7 };
            for (i, v) in dw.iter().enumerate() {
                let (o, ky, kx) = (i / (c_in * 9), i % 9 / 3, i % 3);
                let want = if o == 1 && ky >= 1 && kx >= 1 { f32::INFINITY } else { (2 * inside(ky) * inside(kx)) as f32 };
                assert_eq!(*v, want, "{c_in} input channels: output channel {o}, input channel {}, tap ({ky}, {kx})", i / 9 % c_in);
            }
        }
    }

    #[test]
    fn new_vectors_hold_the_bits_written_into_a_callers_buffer() {
        for s in shapes() {
            let (nx, nw, ny) = s.lens();
            let (x, w, dy) = (values(nx, 0.1), values(nw, 0.7), values(ny, 0.9));
            let (mut y, mut dx) = (vec![f32::NAN; ny], vec![f32::NAN; nx]);
            forward(&s, &x, &w, None, &mut y).unwrap();
            input_grad(&s, &dy, &w, &mut dx).unwrap();
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&forward_new(&s, &x, &w, None, false).unwrap()), bits(&y), "{s:?}");
            assert_eq!(bits(&input_grad_new(&s, &dy, &w).unwrap()), bits(&dx), "{s:?}");
        }
    }

    #[test]
    fn results_are_bit_identical_for_every_thread_count() {
        // Per-image products (P = 108), side-by-side ones (P = 20) and the direct kernel.
        let direct = shape([37, 34, 40], [8, 8], [3, 3], [1, 1], [1, 1]);
        for s in [shape([37, 5, 6], [12, 9], [3, 3], [1, 1], [1, 1]), shape([37, 5, 6], [5, 4], [3, 3], [1, 1], [1, 1]), direct] {
            let at = |threads: usize| rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| run(&s));
            let one = at(1);
            for threads in [2, 3, 8] {
                assert!(at(threads) == one, "{threads} threads");
            }
        }
    }

    #[test]
    fn bad_shapes_and_buffers_name_what_is_wrong() {
        let s = shape([1, 1, 1], [2, 2], [5, 5], [1, 1], [0, 0]);
        assert_eq!(
            forward(&s, &[0.0; 4], &[0.0; 25], None, &mut []),
            Err(Error::Shape(Box::new(s), "kernel larger than the padded input"))
        );
        let s = shape([2, 1, 1], [4, 4], [3, 3], [1, 1], [1, 1]);
        let err = weight_grad(&s, &[0.0; 32], &[0.0; 31], &mut [0.0; 9], None).unwrap_err();
        assert!(err.to_string().contains("output gradient holds 31 values, 32 expected"), "{err}");
        let s = Conv2d { stride: [0, 1], ..s };
        assert!(forward(&s, &[0.0; 32], &[0.0; 9], None, &mut [0.0; 32]).is_err());
    }
}
