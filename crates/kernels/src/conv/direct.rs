//! Direct convolution for stride-1 "same" shapes (output as large as the input, no dilation),
//! used for the forward pass and, as the convolution of the output gradient with the rotated
//! and transposed kernel, for the input gradient. Planes whose rows hold a SIMD vector (16
//! columns and more) take [`super::rows`]'s kernel instead, which computes the same chains with
//! output positions in the lanes; this one runs the smaller planes.
//!
//! Each output is one fused multiply-add chain over `(c_in, ky, kx)` in that order, over the
//! taps that read inside the input only: padding is never multiplied. im2col multiplied it by
//! the weights, so an infinite weight made a NaN at every output whose tap read padding;
//! PyTorch 2.9.0's CPU convolutions do not (measured with an infinite weight in a 40 -> 40,
//! 3x3, 8x8 convolution: no NaN at batch 2 and 64, forward, input and weight gradient; at batch
//! 1 its forward took another path, which gave 15 NaNs). Registers hold up to [`POSITIONS`] output positions by
//! up to four SIMD vectors of output channels; each tap loads the block's weight
//! vectors once and broadcasts one input value per position, read from a zero-padded copy of
//! the image (so that every tap of every position is at a constant offset). The positions of a
//! block read the same kernel rows and columns inside the input: most are interior positions,
//! which read every tap; a plane's border positions form smaller groups.
//!
//! Measured against im2col and the `gemm` crate, batch 64, one thread, AMD EPYC with AVX-512
//! (`conv_kernels` example): AlexNet's layers faster (see docs/performance.md); shapes with
//! fewer than [`MIN_OUT`] output or [`MIN_IN`] input channels were slower, and keep im2col.

use pulp::{Simd, WithSimd};

use crate::shape::Conv2d;

/// Bytes in a cache line.
const ALIGN: usize = 64;
/// Output positions per block: a register block holds them all by one or two SIMD vectors of
/// channels with AVX-512, half of them by three or four (24 accumulators).
const POSITIONS: usize = 12;
/// Fewest output channels (the ones the SIMD vectors hold; for the input gradient, the
/// convolution's input channels) for which the direct kernels beat im2col (batch 64, one
/// thread, AVX-512, `conv_kernels`): 32 -> 32 at 16x16 about even (0.97-1.10x, alternated
/// four times), 32 -> 96 at 16x16, 5x5, 1.07-1.16x; 16 -> 16 at 32x32 0.56x forward and 0.77x
/// weight gradient, 48 -> 16 at 16x16, 5x5, the same as im2col.
const MIN_OUT: usize = 32;
/// Fewest input channels (those a chain runs over) for which they beat im2col: 16 -> 48 at
/// 16x16, 5x5, 1.04x forward and 1.19x weight gradient; 3 -> 32 at 32x32 0.4x.
const MIN_IN: usize = 16;

/// Up to [`POSITIONS`] output positions that share their kernel taps.
#[derive(Clone, Copy, Debug)]
struct Block {
    /// Output positions (`oy * w + ox`) and where each reads tap `(0, 0)` in the padded copy.
    out: [usize; POSITIONS],
    from: [usize; POSITIONS],
    len: usize,
    /// Kernel rows and columns read: `[lo, hi)`.
    ky: (usize, usize),
    kx: (usize, usize),
}

/// A "same" stride-1 convolution of `c_in` planes into `c_out` planes, its weights packed by
/// blocks of output channels.
pub(super) struct Direct {
    g: Geometry,
    /// SIMD lanes the weights were packed for.
    lanes: usize,
    /// Channel blocks: first SIMD vector and vectors.
    channels: Vec<(usize, usize)>,
    /// From `start` on, per channel block, `[c_in][ky][kx][vectors * lanes]`, zero past
    /// `c_out`.
    packed: Vec<f32>,
    start: usize,
    blocks: Vec<Block>,
}

/// What both direct kernels know of their convolution: `c_in` planes of `h x w` into `c_out`
/// planes through a "same" stride-1 kernel, and the layout of an image's zero-padded copy.
#[derive(Clone, Copy, Debug)]
pub(super) struct Geometry {
    pub(super) c_in: usize,
    pub(super) c_out: usize,
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) kernel: [usize; 2],
    pub(super) padding: [usize; 2],
}

impl Geometry {
    /// Shape `s`'s planes and kernel, from `c_in` channels into `c_out`.
    pub(super) fn new(s: &Conv2d, c_in: usize, c_out: usize) -> Self {
        Self { c_in, c_out, h: s.h, w: s.w, kernel: s.kernel, padding: s.padding }
    }

    /// Width of the padded copy of a plane.
    pub(super) fn padded_w(&self) -> usize {
        self.w + 2 * self.padding[1]
    }

    /// Values of the padded copy of a plane.
    pub(super) fn padded_plane(&self) -> usize {
        (self.h + 2 * self.padding[0]) * self.padded_w()
    }

    /// Values of the padded copy of one image.
    pub(super) fn padded_len(&self) -> usize {
        self.c_in * self.padded_plane()
    }

    /// The kernel offsets `[lo, hi)` along `axis` that read inside the input from output `o`.
    pub(super) fn taps(&self, axis: usize, o: usize) -> (usize, usize) {
        let (p, size) = (self.padding[axis], [self.h, self.w][axis]);
        (p.saturating_sub(o), (size + p - o).min(self.kernel[axis]))
    }

    /// Copies image `x` (`c_in` planes of `h x w`) into `padded` ([`Self::padded_len`]
    /// values), each plane inside a border of `padding` rows and columns of zeros.
    #[inline(always)]
    pub(super) fn pad(&self, x: &[f32], padded: &mut [f32]) {
        let ([h, w], [ph, pw], wp) = ([self.h, self.w], self.padding, self.padded_w());
        padded.fill(0.0);
        for (src, dst) in x.chunks_exact(h * w).zip(padded.chunks_exact_mut(self.padded_plane())) {
            for (row, line) in src.chunks_exact(w).zip(dst[ph * wp..].chunks_exact_mut(wp)) {
                line[pw..][..w].copy_from_slice(row);
            }
        }
    }
}

/// Whether the direct kernels run a convolution of shape `s` (a "same" shape at stride 1) from
/// `c_in` channels into `c_out` ones: `s`'s own for the forward pass and the weight gradient,
/// swapped for the input gradient. (The caller keeps planes too small for them, which its
/// side-by-side products run faster, away.)
pub(super) fn applies(s: &Conv2d, c_in: usize, c_out: usize) -> bool {
    same(s) && c_in >= MIN_IN && wide(c_out)
}

/// Whether `c_out` output channels (the ones the SIMD vectors hold) are enough for the direct
/// kernels ([`MIN_OUT`]).
pub(super) fn wide(c_out: usize) -> bool {
    c_out >= MIN_OUT
}

/// Whether `s` is a "same" convolution at stride 1 without dilation (the output as large as
/// the input), the shapes the direct kernels are written for.
pub(super) fn same(s: &Conv2d) -> bool {
    (0..2).all(|a| s.stride[a] == 1 && s.dilation[a] == 1 && 2 * s.padding[a] + 1 == s.kernel[a])
}

/// `channels` in blocks of SIMD vectors of `lanes`: first vector and vectors, four per block
/// with AVX-512 (32 registers), two with AVX2 (16).
pub(super) fn channel_blocks(channels: usize, lanes: usize) -> Vec<(usize, usize)> {
    let (vectors, most) = (channels.div_ceil(lanes), if lanes >= 16 { 4 } else { 2 });
    (0..vectors).step_by(most).map(|v| (v, most.min(vectors - v))).collect()
}

/// The SIMD width pulp's dispatch picks on this CPU.
pub(super) fn simd_lanes() -> usize {
    pulp::Arch::new().dispatch(Lanes)
}

/// The forward pass's weight of output channel `o`, input channel `i`, tap `t = ky * kw + kx`
/// (`weight` is `c_out x c_in x kh x kw`).
pub(super) fn forward_weight<'a>(s: &Conv2d, weight: &'a [f32]) -> impl Fn(usize, usize, usize) -> f32 + 'a {
    let (c_in, k) = (s.c_in, s.kernel[0] * s.kernel[1]);
    move |o, i, t| weight[(o * c_in + i) * k + t]
}

/// The input gradient's weight, as a forward pass from the `c_out` channels of `s` into its
/// `c_in` ones: the kernel rotated by 180 degrees, input and output channels swapped.
pub(super) fn input_grad_weight<'a>(s: &Conv2d, weight: &'a [f32]) -> impl Fn(usize, usize, usize) -> f32 + 'a {
    let (c_in, k) = (s.c_in, s.kernel[0] * s.kernel[1]);
    move |o, i, t| weight[(i * c_in + o) * k + (k - 1 - t)]
}

/// Positions a register block can hold for `vectors` SIMD vectors of channels: `N * vectors`
/// accumulators, the vectors and a broadcast value in 32 registers with AVX-512 (16 with
/// AVX2); [`POSITIONS`] or half.
pub(super) const fn positions(lanes: usize, vectors: usize) -> usize {
    let registers = if lanes >= 16 { 32 } else { 16 };
    if POSITIONS * vectors + vectors + 2 <= registers { POSITIONS } else { POSITIONS / 2 }
}

/// The SIMD width pulp's dispatch picks on this CPU.
struct Lanes;

impl WithSimd for Lanes {
    type Output = usize;
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) -> usize {
        S::F32_LANES
    }
}

impl Direct {
    /// The forward pass of `s`, when the shape takes the direct kernel.
    pub(super) fn forward(s: &Conv2d, weight: &[f32]) -> Option<Self> {
        Self::forward_for(s, weight, simd_lanes())
    }

    /// [`Self::forward`], its weights packed for SIMD vectors of `lanes` values.
    fn forward_for(s: &Conv2d, weight: &[f32], lanes: usize) -> Option<Self> {
        Self::new(s, s.c_in, s.c_out, forward_weight(s, weight), lanes)
    }

    /// The input gradient of `s` as a forward pass: the output gradient (`c_out` planes)
    /// convolved with the kernel rotated by 180 degrees, input and output channels swapped.
    /// At stride 1 the rotated kernel's padding is `k - 1 - padding`, which is `padding` for the
    /// "same" shapes this takes.
    pub(super) fn input_grad(s: &Conv2d, weight: &[f32]) -> Option<Self> {
        Self::input_grad_for(s, weight, simd_lanes())
    }

    /// [`Self::input_grad`], its weights packed for SIMD vectors of `lanes` values.
    fn input_grad_for(s: &Conv2d, weight: &[f32], lanes: usize) -> Option<Self> {
        Self::new(s, s.c_out, s.c_in, input_grad_weight(s, weight), lanes)
    }

    /// `get(o, i, t)`: the weight of output channel `o`, input channel `i`, tap `t = ky * kw + kx`.
    fn new(s: &Conv2d, c_in: usize, c_out: usize, get: impl Fn(usize, usize, usize) -> f32, lanes: usize) -> Option<Self> {
        if !applies(s, c_in, c_out) {
            return None;
        }
        let (vectors, channels) = (c_out.div_ceil(lanes), channel_blocks(c_out, lanes));
        let taps = s.kernel[0] * s.kernel[1];
        // The packed weights start on a cache line (`start` values in): a vector load that
        // straddles two lines costs two (measured: 48 -> 96 channels, 3x3, 8x8 took 4.3 ms
        // unaligned against 3.2 aligned).
        let mut packed = vec![0.0; ALIGN / size_of::<f32>()];
        let start = packed.as_ptr().align_offset(ALIGN).min(packed.len());
        packed.truncate(start);
        packed.reserve_exact(vectors * lanes * c_in * taps);
        for &(first, n) in &channels {
            for i in 0..c_in {
                for t in 0..taps {
                    packed.extend((first * lanes..(first + n) * lanes).map(|o| if o < c_out { get(o, i, t) } else { 0.0 }));
                }
            }
        }
        let mut d = Self { g: Geometry::new(s, c_in, c_out), lanes, channels, packed, start, blocks: Vec::new() };
        d.blocks = d.plan();
        Some(d)
    }

    /// The blocks of one plane: the positions grouped by the kernel rows and columns they read
    /// inside the input (in position order within a group), in runs of [`POSITIONS`]. Every
    /// position of a block reads exactly the block's taps.
    fn plan(&self) -> Vec<Block> {
        let (g, w, wp) = (&self.g, self.g.w, self.g.padded_w());
        let mut at: Vec<(usize, usize)> = (0..g.h).flat_map(|oy| (0..w).map(move |ox| (oy, ox))).collect();
        at.sort_by_key(|&(oy, ox)| (g.taps(0, oy), g.taps(1, ox)));
        let mut blocks: Vec<Block> = Vec::new();
        for (oy, ox) in at {
            let (ky, kx, out, from) = (g.taps(0, oy), g.taps(1, ox), oy * w + ox, oy * wp + ox);
            match blocks.last_mut() {
                Some(b) if b.len < POSITIONS && (b.ky, b.kx) == (ky, kx) => {
                    (b.out[b.len], b.from[b.len]) = (out, from);
                    b.len += 1;
                }
                _ => blocks.push(Block { out: [out; POSITIONS], from: [from; POSITIONS], len: 1, ky, kx }),
            }
        }
        blocks
    }
}

/// A direct kernel planned for one shape and SIMD width, run image by image.
pub(super) trait PerImage: Sized {
    /// SIMD lanes the plan (and the packed weights) was made for.
    fn lanes(&self) -> usize;

    /// The convolution's planes and kernel.
    fn geometry(&self) -> &Geometry;

    /// Values of the padded copy of one image.
    fn padded_len(&self) -> usize {
        self.geometry().padded_len()
    }

    /// Convolves one image `x` into `y` with the instructions of `simd` (of [`Self::lanes`]);
    /// `padded` is scratch of [`Self::padded_len`] values.
    fn run<S: Simd>(&self, simd: S, x: &[f32], y: &mut [f32], padded: &mut [f32]);

    /// Convolves one image `x` (`c_in x h x w`) into `y` (`c_out x h x w`) with the SIMD
    /// instructions pulp dispatches to; `padded` is scratch of [`Self::padded_len`] values.
    fn image(&self, x: &[f32], y: &mut [f32], padded: &mut [f32]) {
        pulp::Arch::new().dispatch(Image { k: self, x, y, padded });
    }

    /// [`Self::image`] with the SIMD instructions of `simd` (the plan must be made for its
    /// width).
    #[cfg(test)]
    fn image_with<S: Simd>(&self, simd: S, x: &[f32], y: &mut [f32], padded: &mut [f32]) {
        Image { k: self, x, y, padded }.with_simd(simd);
    }
}

/// One image's convolution, compiled for the SIMD width pulp dispatches to.
struct Image<'a, K> {
    k: &'a K,
    x: &'a [f32],
    y: &'a mut [f32],
    padded: &'a mut [f32],
}

impl<K: PerImage> WithSimd for Image<'_, K> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        assert_eq!(S::F32_LANES, self.k.lanes(), "planned for another SIMD width");
        self.k.run(simd, self.x, self.y, self.padded);
    }
}

impl PerImage for Direct {
    fn lanes(&self) -> usize {
        self.lanes
    }

    fn geometry(&self) -> &Geometry {
        &self.g
    }

    #[inline(always)]
    fn run<S: Simd>(&self, simd: S, x: &[f32], y: &mut [f32], padded: &mut [f32]) {
        let (d, g) = (self, &self.g);
        let (wp, plane) = (g.padded_w(), g.padded_plane());
        g.pad(x, padded);
        let per_channel = g.c_in * g.kernel[0] * g.kernel[1];
        let mut weights = &d.packed[d.start..];
        for &(first, n) in &d.channels {
            let (block, rest) = weights.split_at(per_channel * n * d.lanes);
            weights = rest;
            let k = Kernel { d, padded, plane, wp, weights: block, first: first * d.lanes };
            for b in &d.blocks {
                match n {
                    4 => k.run::<S, 4>(simd, b, y),
                    3 => k.run::<S, 3>(simd, b, y),
                    2 => k.run::<S, 2>(simd, b, y),
                    _ => k.run::<S, 1>(simd, b, y),
                }
            }
        }
    }
}

/// What a register block reads: the padded image and one channel block's weights.
struct Kernel<'a> {
    d: &'a Direct,
    padded: &'a [f32],
    plane: usize,
    wp: usize,
    weights: &'a [f32],
    /// First output channel of the block.
    first: usize,
}

impl Kernel<'_> {
    /// Block `b`'s outputs for `V` vectors of channels, in runs of as many positions as the
    /// registers hold ([`positions`]).
    #[inline(always)]
    fn run<S: Simd, const V: usize>(&self, simd: S, b: &Block, y: &mut [f32]) {
        let most = positions(S::F32_LANES, V);
        let mut at = 0;
        while at < b.len {
            let n = (b.len - at).min(most);
            match n {
                12 => self.block::<S, 12, V>(simd, b, at, y),
                11 => self.block::<S, 11, V>(simd, b, at, y),
                10 => self.block::<S, 10, V>(simd, b, at, y),
                9 => self.block::<S, 9, V>(simd, b, at, y),
                8 => self.block::<S, 8, V>(simd, b, at, y),
                7 => self.block::<S, 7, V>(simd, b, at, y),
                6 => self.block::<S, 6, V>(simd, b, at, y),
                5 => self.block::<S, 5, V>(simd, b, at, y),
                4 => self.block::<S, 4, V>(simd, b, at, y),
                3 => self.block::<S, 3, V>(simd, b, at, y),
                2 => self.block::<S, 2, V>(simd, b, at, y),
                _ => self.block::<S, 1, V>(simd, b, at, y),
            }
            at += n;
        }
    }

    /// Block `b`'s `N` positions from `at` by `V` vectors of channels: one fused multiply-add
    /// chain per output over the block's taps, channel-major, then each value stored into its
    /// plane.
    #[inline(always)]
    fn block<S: Simd, const N: usize, const V: usize>(&self, simd: S, b: &Block, at: usize, y: &mut [f32]) {
        let [kh, kw] = self.d.g.kernel;
        let (w, _) = S::as_simd_f32s(self.weights);
        // Arrays of `N`, so that every loop over the positions has a constant trip count and
        // the accumulators stay in registers.
        let from: [usize; N] = std::array::from_fn(|j| b.from[at + j]);
        let mut acc = [[simd.splat_f32s(0.0); V]; N];
        for (c, plane) in self.padded.chunks_exact(self.plane).enumerate() {
            for ky in b.ky.0..b.ky.1 {
                let row = &plane[ky * self.wp..];
                for kx in b.kx.0..b.kx.1 {
                    let t = ((c * kh + ky) * kw + kx) * V;
                    let wv: [S::f32s; V] = std::array::from_fn(|v| w[t + v]);
                    for (a, &from) in acc.iter_mut().zip(&from) {
                        let xv = simd.splat_f32s(row[from + kx]);
                        for (a, &wv) in a.iter_mut().zip(&wv) {
                            *a = simd.mul_add_f32s(xv, wv, *a);
                        }
                    }
                }
            }
        }
        let hw = self.d.g.h * self.d.g.w;
        let mut lanes = [0.0f32; 4 * 16];
        let count = (self.d.g.c_out - self.first).min(V * self.d.lanes);
        for (a, &out) in acc.iter().zip(&b.out[at..at + N]) {
            S::as_mut_simd_f32s(&mut lanes).0[..V].copy_from_slice(a);
            for (o, &v) in lanes[..count].iter().enumerate() {
                y[(self.first + o) * hw + out] = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn shape(c_in: usize, c_out: usize, [h, w]: [usize; 2], kernel: [usize; 2]) -> Conv2d {
        let padding = kernel.map(|k| k / 2);
        Conv2d { batch: 1, c_in, h, w, c_out, kernel, stride: [1, 1], padding, dilation: [1, 1] }
    }

    /// Runs `d` on `x` with the instructions of `simd`.
    fn run<S: Simd>(simd: S, d: &Direct, x: &[f32], len: usize) -> Vec<u32> {
        let (mut y, mut padded) = (vec![f32::NAN; len], vec![f32::NAN; d.padded_len()]);
        d.image_with(simd, x, &mut y, &mut padded);
        y.iter().map(|v| v.to_bits()).collect()
    }

    /// Every instruction set computes the same fused chains: scalar, AVX2 and AVX-512 (where the
    /// CPU has them) give the same bits, forward and input gradient, channels that fill no
    /// whole vector included.
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        for s in [shape(33, 37, [8, 9], [3, 5]), shape(40, 70, [9, 8], [3, 3])] {
            let (nx, nw, ny) = s.lens();
            let value = |i: usize, salt: f32| ((i as f32 + salt) * 0.618_034).fract() - 0.5;
            let (x, w, dy): (Vec<f32>, Vec<f32>, Vec<f32>) = (
                (0..nx).map(|i| value(i, 0.1)).collect(),
                (0..nw).map(|i| value(i, 0.7)).collect(),
                (0..ny).map(|i| value(i, 0.9)).collect(),
            );
            let scalar = pulp::Scalar::new();
            let want = (
                run(scalar, &Direct::forward_for(&s, &w, 1).unwrap(), &x, ny),
                run(scalar, &Direct::input_grad_for(&s, &w, 1).unwrap(), &dy, nx),
            );
            #[cfg(target_arch = "x86_64")]
            {
                if let Some(simd) = pulp::x86::V3::try_new() {
                    let got = (
                        run(simd, &Direct::forward_for(&s, &w, 8).unwrap(), &x, ny),
                        run(simd, &Direct::input_grad_for(&s, &w, 8).unwrap(), &dy, nx),
                    );
                    assert!(got == want, "AVX2, {s:?}");
                }
                #[cfg(feature = "avx512")]
                if let Some(simd) = pulp::x86::V4::try_new() {
                    let got = (
                        run(simd, &Direct::forward_for(&s, &w, 16).unwrap(), &x, ny),
                        run(simd, &Direct::input_grad_for(&s, &w, 16).unwrap(), &dy, nx),
                    );
                    assert!(got == want, "AVX-512, {s:?}");
                }
            }
        }
    }

    /// Each block's positions read exactly its taps inside the input, and every position of the
    /// plane is in one block.
    #[test]
    fn blocks_cover_the_plane_once_with_the_taps_each_position_reads() {
        for s in [shape(32, 48, [8, 8], [3, 3]), shape(32, 48, [16, 13], [5, 5]), shape(32, 48, [9, 9], [3, 7])] {
            let d = Direct::forward_for(&s, &vec![0.0; s.lens().1], 16).unwrap();
            let mut seen = vec![0; s.h * s.w];
            for b in &d.blocks {
                assert!((1..=POSITIONS).contains(&b.len));
                for &out in &b.out[..b.len] {
                    seen[out] += 1;
                    let (oy, ox) = (out / s.w, out % s.w);
                    assert_eq!((b.ky, b.kx), (d.g.taps(0, oy), d.g.taps(1, ox)), "{out} in {b:?}");
                    assert!(b.ky.0 < b.ky.1 && b.kx.0 < b.kx.1);
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        }
    }
}
