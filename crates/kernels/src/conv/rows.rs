//! Direct convolution for stride-1 "same" shapes whose rows hold a SIMD vector (16 columns and
//! more), SIMD lanes over output positions along a row: the forward pass and, as the
//! convolution of the output gradient with the rotated and transposed kernel, the input
//! gradient.
//!
//! [`super::direct`] puts output channels in the lanes: below 32 channels that leaves most of
//! each vector idle, so such layers took im2col, and every output value is stored alone. Here a
//! vector holds consecutive outputs of one row of one output channel: each tap loads the
//! inputs under a register block's vectors once (a plain load from the zero-padded copy, at a
//! constant offset per tap) and broadcasts one weight per channel; outputs are stored a vector
//! at a time. Measured against both, batch 64, one thread, AVX-512 (`conv_kernels`, best of
//! two alternations): 16 -> 16 at 32x32, 3x3, forward and input gradient 3.0 ms each against
//! im2col's 3.9 and 4.6; 48 -> 16 at 16x16, 5x5, 5.4 ms against 7.0; 32 -> 96 at 16x16, 5x5,
//! 20.7 and 21.0 ms against the channel kernel's 22.5 and 21.9.
//!
//! Each output is the same fused multiply-add chain as in [`super::direct`]: over
//! `(c_in, ky, kx)` in that order, over the taps that read inside the input only, from zero. A
//! lane whose tap reads padding keeps its sum unchanged (a select, which AVX-512 folds into a
//! masked multiply-add): padding is never multiplied, so an infinite weight makes no NaN at
//! the border, and the two kernels give the same bits wherever both apply.

use pulp::Simd;

use super::direct::{Geometry, PerImage, forward_weight, input_grad_weight, same, simd_lanes};
use crate::shape::Conv2d;

/// Fewest output channels: 16 -> 8 at 32x32, 3x3, took 1.72 ms against im2col's 2.28, but 32
/// -> 3 at 32x32, 5x5, 8.5 ms against 4.5 (batch 64, one thread, AVX-512, `conv_kernels`).
const MIN_OUT: usize = 8;
/// Fewest columns: a row holds a whole vector at every SIMD width in use (16 lanes and fewer).
const MIN_W: usize = 16;
/// Widest kernel: a register block keeps one lane mask per vector and kernel column.
const MAX_KW: usize = 7;
/// Most vectors in a register block.
const MAX_VECTORS: usize = 3;

/// Up to [`MAX_VECTORS`] vectors of outputs, each in one row, rows reading the same kernel rows.
#[derive(Clone, Copy, Debug)]
struct Block {
    /// Per vector: its first output (`oy * w + x0`), where it reads tap `(0, 0)` in a padded
    /// plane, and its first column `x0`.
    out: [usize; MAX_VECTORS],
    from: [usize; MAX_VECTORS],
    x0: [usize; MAX_VECTORS],
    len: usize,
    /// Kernel rows read: `[lo, hi)`.
    ky: (usize, usize),
}

/// A "same" stride-1 convolution of `c_in` planes into `c_out` planes, its weights packed by
/// groups of output channels.
pub(super) struct Rows {
    g: Geometry,
    /// SIMD lanes the plan was made for.
    lanes: usize,
    /// Output channel groups: first channel and channels ([`group_size`]).
    groups: Vec<(usize, usize)>,
    /// Per group, `[c_in][ky][kx][group]`, zero past `c_out`.
    packed: Vec<f32>,
    /// The plane's register blocks for each number of vectors a group's blocks hold.
    plans: Vec<(usize, Vec<Block>)>,
}

/// Whether this kernel runs a convolution of shape `s` into `c_out` channels: `s`'s own for the
/// forward pass, its input channels for the input gradient.
pub(super) fn applies(s: &Conv2d, c_out: usize) -> bool {
    same(s) && c_out >= MIN_OUT && s.w >= MIN_W && s.kernel[1] <= MAX_KW
}

/// Output channels per group for SIMD vectors of `lanes`, given `left` channels still to
/// group: with AVX-512, 16 (a register block of one vector: 16 sums, its inputs and a
/// broadcast weight) or, for 8 channels or fewer, 8 (three vectors: 24 sums); 4 otherwise (two
/// vectors: 8 sums in AVX2's 16 registers).
fn group_size(lanes: usize, left: usize) -> usize {
    match lanes {
        16.. if left > 8 => 16,
        16.. => 8,
        _ => 4,
    }
}

/// Vectors of a register block of `group` output channels ([`group_size`]).
const fn vectors(group: usize) -> usize {
    match group {
        16 => 1,
        8 => 3,
        _ => 2,
    }
}

impl Rows {
    /// The forward pass of `s`, when the shape takes this kernel.
    pub(super) fn forward(s: &Conv2d, weight: &[f32]) -> Option<Self> {
        Self::forward_for(s, weight, simd_lanes())
    }

    /// [`Self::forward`], planned for SIMD vectors of `lanes` values.
    pub(super) fn forward_for(s: &Conv2d, weight: &[f32], lanes: usize) -> Option<Self> {
        Self::new(s, s.c_in, s.c_out, forward_weight(s, weight), lanes)
    }

    /// The input gradient of `s` as a forward pass: the output gradient convolved with the
    /// kernel rotated by 180 degrees, input and output channels swapped (see
    /// [`super::direct::Direct::input_grad`]).
    pub(super) fn input_grad(s: &Conv2d, weight: &[f32]) -> Option<Self> {
        Self::input_grad_for(s, weight, simd_lanes())
    }

    /// [`Self::input_grad`], planned for SIMD vectors of `lanes` values.
    pub(super) fn input_grad_for(s: &Conv2d, weight: &[f32], lanes: usize) -> Option<Self> {
        Self::new(s, s.c_out, s.c_in, input_grad_weight(s, weight), lanes)
    }

    /// `get(o, i, t)`: the weight of output channel `o`, input channel `i`, tap `t = ky * kw + kx`.
    fn new(s: &Conv2d, c_in: usize, c_out: usize, get: impl Fn(usize, usize, usize) -> f32, lanes: usize) -> Option<Self> {
        if !applies(s, c_out) {
            return None;
        }
        let (mut groups, mut first) = (Vec::new(), 0);
        while first < c_out {
            let n = group_size(lanes, c_out - first);
            groups.push((first, n));
            first += n;
        }
        let taps = s.kernel[0] * s.kernel[1];
        let mut packed = Vec::with_capacity(groups.iter().map(|g| g.1).sum::<usize>() * c_in * taps);
        for &(first, n) in &groups {
            for i in 0..c_in {
                for t in 0..taps {
                    packed.extend((first..first + n).map(|o| if o < c_out { get(o, i, t) } else { 0.0 }));
                }
            }
        }
        let mut r = Self { g: Geometry::new(s, c_in, c_out), lanes, groups, packed, plans: Vec::new() };
        // A plan per register block, so that each block is one call of the kernel: called in a
        // loop over a longer block's vectors, the kernel kept its 16 sums in memory across
        // kernel rows (16 -> 16 at 32x32: 6.0 ms against 3.0).
        let mut most: Vec<usize> = r.groups.iter().map(|&(_, n)| vectors(n)).collect();
        most.sort_unstable();
        most.dedup();
        r.plans = most.into_iter().map(|v| (v, r.plan(v))).collect();
        Some(r)
    }

    /// The lanes `[lo, hi)` of the vector whose first column is `x0` that read inside the input
    /// at kernel column `kx`.
    fn lanes_inside(&self, x0: usize, kx: usize) -> (usize, usize) {
        let (p, at) = (self.g.padding[1], x0 + kx);
        (p.saturating_sub(at).min(self.lanes), (p + self.g.w).saturating_sub(at).min(self.lanes))
    }

    /// The vectors of one plane, row by row (the last of a row overlapping its neighbour when
    /// the row is no whole number of vectors), in register blocks of consecutive vectors whose
    /// rows read the same kernel rows, up to `most` vectors each.
    fn plan(&self, most: usize) -> Vec<Block> {
        let (l, g, wp) = (self.lanes, &self.g, self.g.padded_w());
        let mut blocks: Vec<Block> = Vec::new();
        for oy in 0..g.h {
            let ky = g.taps(0, oy);
            for x0 in (0..g.w).step_by(l).map(|x| x.min(g.w - l)) {
                let (out, from) = (oy * g.w + x0, oy * wp + x0);
                match blocks.last_mut() {
                    Some(b) if b.len < most && b.ky == ky => {
                        (b.out[b.len], b.from[b.len], b.x0[b.len]) = (out, from, x0);
                        b.len += 1;
                    }
                    _ => blocks.push(Block { out: [out; MAX_VECTORS], from: [from; MAX_VECTORS], x0: [x0; MAX_VECTORS], len: 1, ky }),
                }
            }
        }
        blocks
    }
}

impl PerImage for Rows {
    fn lanes(&self) -> usize {
        self.lanes
    }

    fn geometry(&self) -> &Geometry {
        &self.g
    }

    #[inline(always)]
    fn run<S: Simd>(&self, simd: S, x: &[f32], y: &mut [f32], padded: &mut [f32]) {
        let (r, g) = (self, &self.g);
        g.pad(x, padded);
        let mut weights = &r.packed[..];
        for &(first, n) in &r.groups {
            let (group, rest) = weights.split_at(g.c_in * g.kernel[0] * g.kernel[1] * n);
            weights = rest;
            let k = Kernel { r, padded, weights: group, first };
            let blocks = r.plans.iter().find(|p| p.0 == vectors(n)).map_or(&[][..], |p| &p.1);
            for b in blocks {
                match (n, b.len) {
                    (16, _) => k.block::<S, 16, 1>(simd, b, y),
                    (8, 3) => k.block::<S, 8, 3>(simd, b, y),
                    (8, 2) => k.block::<S, 8, 2>(simd, b, y),
                    (8, _) => k.block::<S, 8, 1>(simd, b, y),
                    (_, 2) => k.block::<S, 4, 2>(simd, b, y),
                    _ => k.block::<S, 4, 1>(simd, b, y),
                }
            }
        }
    }
}

/// What a register block reads: the padded image and one channel group's weights.
struct Kernel<'a> {
    r: &'a Rows,
    padded: &'a [f32],
    weights: &'a [f32],
    /// First output channel of the group.
    first: usize,
}

/// The `S::F32_LANES` values of `s` from `at` as a vector.
#[inline(always)]
fn load<S: Simd>(s: &[f32], at: usize) -> S::f32s {
    S::as_simd_f32s(&s[at..at + S::F32_LANES]).0[0]
}

impl Kernel<'_> {
    /// Block `b`'s `V` vectors for `O` output channels from `self.first`: one fused
    /// multiply-add chain per output over the block's kernel rows, every kernel column and
    /// the input channels, channel-major, lanes whose tap reads padding left unchanged.
    #[inline(always)]
    fn block<S: Simd, const O: usize, const V: usize>(&self, simd: S, b: &Block, y: &mut [f32]) {
        let (r, g) = (self.r, &self.r.g);
        let ([kh, kw], wp, plane) = (g.kernel, g.padded_w(), g.padded_plane());
        // Filled by loops, not `array::from_fn`, which LLVM may leave as a call that keeps the
        // arrays in memory (see `weight.rs`).
        let none = simd.mask_between_m32s(0, 0).mask();
        let mut inside = [[none; MAX_KW]; V];
        for (v, masks) in inside.iter_mut().enumerate() {
            for (kx, m) in masks.iter_mut().enumerate().take(kw) {
                let (lo, hi) = r.lanes_inside(b.x0[v], kx);
                *m = simd.mask_between_m32s(lo as u32, hi as u32).mask();
            }
        }
        let mut acc = [[simd.splat_f32s(0.0); V]; O];
        for (c, padded) in self.padded.chunks_exact(plane).enumerate() {
            for ky in b.ky.0..b.ky.1 {
                for kx in 0..kw {
                    let w = &self.weights[((c * kh + ky) * kw + kx) * O..][..O];
                    let mut xv = [simd.splat_f32s(0.0); V];
                    for (x, &from) in xv.iter_mut().zip(&b.from) {
                        *x = load::<S>(padded, from + ky * wp + kx);
                    }
                    for (acc, &w) in acc.iter_mut().zip(w) {
                        let w = simd.splat_f32s(w);
                        for ((a, &x), m) in acc.iter_mut().zip(&xv).zip(&inside) {
                            *a = simd.select_f32s(m[kx], simd.mul_add_f32s(x, w, *a), *a);
                        }
                    }
                }
            }
        }
        let hw = g.h * g.w;
        for (o, acc) in acc.iter().enumerate().take(g.c_out.saturating_sub(self.first)) {
            for (a, &out) in acc.iter().zip(&b.out) {
                let at = (self.first + o) * hw + out;
                S::as_mut_simd_f32s(&mut y[at..at + S::F32_LANES]).0[0] = *a;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::conv::Planned;
    use crate::conv::direct::Direct;

    fn shape(c_in: usize, c_out: usize, [h, w]: [usize; 2], kernel: [usize; 2]) -> Conv2d {
        let padding = kernel.map(|k| k / 2);
        Conv2d { batch: 1, c_in, h, w, c_out, kernel, stride: [1, 1], padding, dilation: [1, 1] }
    }

    fn value(i: usize, salt: f32) -> f32 {
        ((i as f32 + salt) * 0.618_034).fract() - 0.5
    }

    /// Runs `r` on `x` with the instructions of `simd`.
    fn run<S: Simd>(simd: S, r: &Rows, x: &[f32], len: usize) -> Vec<u32> {
        let (mut y, mut padded) = (vec![f32::NAN; len], vec![f32::NAN; r.padded_len()]);
        r.image_with(simd, x, &mut y, &mut padded);
        y.iter().map(|v| v.to_bits()).collect()
    }

    /// The input, weights and output gradient of `s`'s tests.
    fn inputs(s: &Conv2d) -> [Vec<f32>; 3] {
        let (nx, nw, ny) = s.lens();
        [(nx, 0.1), (nw, 0.7), (ny, 0.9)].map(|(n, salt)| (0..n).map(|i| value(i, salt)).collect())
    }

    /// The forward pass and input gradient of `s`, each where this kernel takes it, planned for
    /// `lanes` and run with `simd`.
    fn both<S: Simd>(simd: S, s: &Conv2d, lanes: usize) -> [Option<Vec<u32>>; 2] {
        let (nx, _, ny) = s.lens();
        let [x, w, dy] = inputs(s);
        let forward = Rows::forward_for(s, &w, lanes).map(|r| run(simd, &r, &x, ny));
        let input = Rows::input_grad_for(s, &w, lanes).map(|r| run(simd, &r, &dy, nx));
        [forward, input]
    }

    /// Every instruction set computes the same fused chains: the portable code (which every CPU
    /// runs) gives the convolution's definition to rounding, and AVX2 and AVX-512 (where the CPU
    /// has them) give its bits, forward and input gradient: rows that are no whole number of
    /// vectors, channel groups of 16, 8 and 4, few input channels, the widest kernel.
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        for (s, directions) in [
            (shape(12, 40, [4, 33], [3, 3]), 2),
            (shape(9, 8, [3, 16], [1, 7]), 2),
            (shape(3, 20, [6, 21], [5, 5]), 1),
            (shape(8, 11, [5, 19], [3, 5]), 2),
        ] {
            let want = both(pulp::Scalar::new(), &s, 1);
            assert_eq!(want.iter().flatten().count(), directions, "{s:?}");
            let [x, w, dy] = inputs(&s);
            let (y, dx, _) = crate::conv::tests::Naive(&s).all(&x, &w, &dy);
            for (got, (definition, what)) in want.iter().zip([(y, "forward"), (dx, "input gradient")]) {
                if let Some(got) = got {
                    let got: Vec<f32> = got.iter().map(|&b| f32::from_bits(b)).collect();
                    crate::conv::tests::close(&got, &definition, &format!("portable {what}"), &s);
                }
            }
            #[cfg(target_arch = "x86_64")]
            {
                if let Some(simd) = pulp::x86::V3::try_new() {
                    assert!(both(simd, &s, 8) == want, "AVX2, {s:?}");
                }
                #[cfg(feature = "avx512")]
                if let Some(simd) = pulp::x86::V4::try_new() {
                    assert!(both(simd, &s, 16) == want, "AVX-512, {s:?}");
                }
            }
        }
    }

    /// The bits of `p` run on `x` into `len` values.
    fn bits(p: &Planned, x: &[f32], len: usize) -> Vec<u32> {
        let (mut y, mut padded) = (vec![f32::NAN; len], vec![f32::NAN; p.padded_len()]);
        p.image(x, &mut y, &mut padded);
        y.iter().map(|v| v.to_bits()).collect()
    }

    /// Where the kernel with channels in the lanes also applies (at least 16 input and 32 output
    /// channels), both give the same bits: the same chains, lanes across another axis.
    #[test]
    fn the_same_bits_as_the_channel_kernel() {
        for s in [shape(32, 40, [9, 18], [3, 5]), shape(40, 33, [5, 16], [5, 3])] {
            let (nx, nw, ny) = s.lens();
            let (x, w): (Vec<f32>, Vec<f32>) = ((0..nx).map(|i| value(i, 0.1)).collect(), (0..nw).map(|i| value(i, 0.7)).collect());
            let dy: Vec<f32> = (0..ny).map(|i| value(i, 0.9)).collect();
            let (r, d) = (Rows::forward(&s, &w).unwrap(), Direct::forward(&s, &w).unwrap());
            assert!(bits(&Planned::Rows(r), &x, ny) == bits(&Planned::Channels(d), &x, ny), "forward, {s:?}");
            let (r, d) = (Rows::input_grad(&s, &w).unwrap(), Direct::input_grad(&s, &w).unwrap());
            assert!(bits(&Planned::Rows(r), &dy, nx) == bits(&Planned::Channels(d), &dy, nx), "input gradient, {s:?}");
        }
    }

    /// Every output position is in a vector of its own row, and each block's rows read exactly
    /// the block's kernel rows inside the input.
    #[test]
    fn vectors_cover_every_row_with_the_kernel_rows_it_reads() {
        for (s, lanes) in [(shape(8, 8, [5, 16], [3, 3]), 16), (shape(8, 20, [7, 37], [5, 5]), 16), (shape(8, 9, [4, 19], [3, 7]), 8)] {
            let r = Rows::forward_for(&s, &vec![0.0; s.lens().1], lanes).unwrap();
            for (most, blocks) in &r.plans {
                let mut seen = vec![0; s.h * s.w];
                for b in blocks {
                    assert!((1..=*most).contains(&b.len), "{b:?}");
                    for v in 0..b.len {
                        let (oy, x0) = (b.out[v] / s.w, b.x0[v]);
                        assert!(x0 + lanes <= s.w && b.out[v] == oy * s.w + x0, "{b:?}");
                        assert_eq!(b.from[v], oy * r.g.padded_w() + x0, "{b:?}");
                        assert_eq!(b.ky, r.g.taps(0, oy), "{b:?}");
                        seen[b.out[v]..b.out[v] + lanes].iter_mut().for_each(|n| *n += 1);
                    }
                }
                assert!(seen.iter().all(|&n| n >= 1), "{seen:?}");
            }
        }
    }
}
