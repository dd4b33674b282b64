//! The weight gradient of the "same" stride-1 shapes with enough output channels for the direct
//! kernels ([`direct::same`], [`direct::wide`]), whatever their input channels, without im2col:
//! `dW[o][i][ky][kx]` is one fused multiply-add chain per chunk of images over the images and,
//! row by row, the output positions whose tap `(ky, kx)` reads inside the input (padding is
//! never multiplied, so an infinite output gradient gives no NaN at the taps that only read
//! padding next to it). The chunks' chains are added in chunk order by the caller.
//!
//! Registers hold up to [`direct::positions`] input channels by up to four SIMD vectors of
//! output channels at one tap; each output position loads its output-gradient vectors once
//! (from a copy of the image's gradient with the channels last) and broadcasts one input value
//! per input channel (from a zero-padded copy of the image with the channels last, so that
//! the channels' values at a position are one run: with a plane per channel, 12 planes' bases
//! filled the general registers, and the weight gradient of 32 -> 96 channels, 5x5, 16x16 took
//! 27.0 ms instead of 23.5).

use pulp::{Simd, WithSimd};

use super::direct::{self, channel_blocks, positions};
use crate::shape::Conv2d;

/// Bytes of the transposed output gradient one pass over the taps reads: its rows are taken in
/// tiles of this size, so that they stay in the first-level cache while every tap reads them.
const TILE_BYTES: usize = 32 << 10;

/// Channels and positions of a tile of [`transpose`].
const TILE: usize = 16;

/// Values in a cache line.
const ALIGN_VALUES: usize = 16;

/// One weight gradient's geometry and SIMD layout.
pub(super) struct WeightGrad {
    s: Conv2d,
    lanes: usize,
    /// Output channels rounded up to whole SIMD vectors: the partial sums' row length.
    width: usize,
    channels: Vec<(usize, usize)>,
}

impl WeightGrad {
    /// The direct weight gradient of `s`, when the shape takes it.
    pub(super) fn new(s: &Conv2d) -> Option<Self> {
        Self::with_lanes(s, direct::simd_lanes())
    }

    fn with_lanes(s: &Conv2d, lanes: usize) -> Option<Self> {
        // Every shape the direct forward pass takes, and those with fewer input channels (a
        // first layer): 3 -> 32 channels, 5x5, 32x32 took 4.6 ms against 7.0 with im2col
        // (batch 64, one thread, `conv_kernels`).
        (direct::same(s) && direct::wide(s.c_out)).then(|| Self {
            s: *s,
            lanes,
            width: s.c_out.div_ceil(lanes) * lanes,
            channels: channel_blocks(s.c_out, lanes),
        })
    }

    /// Values of one chunk's partial sums: `[c_in][ky][kx][width]`, output channels last.
    pub(super) fn len(&self) -> usize {
        self.s.k() * self.width
    }

    /// Length of a row of the partial sums (output channels rounded up to whole vectors).
    pub(super) fn width(&self) -> usize {
        self.width
    }

    /// Scratch values [`Self::chunk`] needs: a padded image and an image's transposed gradient.
    pub(super) fn scratch_len(&self) -> usize {
        let s = &self.s;
        s.c_in * (s.h + 2 * s.padding[0]) * (s.w + 2 * s.padding[1]) + s.p() * self.width + ALIGN_VALUES
    }

    /// The partial sums of the images `x` (`c_in x h x w` each) and their output gradients `dy`
    /// into `acc` ([`Self::len`] values, overwritten); `scratch` holds [`Self::scratch_len`].
    pub(super) fn chunk(&self, x: &[f32], dy: &[f32], acc: &mut [f32], scratch: &mut [f32]) {
        pulp::Arch::new().dispatch(Chunk { g: self, x, dy, acc, scratch });
    }
}

/// A chunk's weight gradient, compiled for the SIMD width pulp dispatches to.
struct Chunk<'a> {
    g: &'a WeightGrad,
    x: &'a [f32],
    dy: &'a [f32],
    acc: &'a mut [f32],
    scratch: &'a mut [f32],
}

impl WithSimd for Chunk<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Chunk { g, x, dy, acc, scratch } = self;
        assert_eq!(S::F32_LANES, g.lanes, "laid out for another SIMD width");
        let s = &g.s;
        let (p, image_in, image_out) = (s.p(), s.c_in * s.h * s.w, s.c_out * s.p());
        // The transposed gradient starts on a cache line, so that its vector loads do not
        // straddle two.
        let (padded, rest) = scratch.split_at_mut(scratch.len() - p * g.width - ALIGN_VALUES);
        let skip = rest.as_ptr().align_offset(ALIGN_VALUES * size_of::<f32>()).min(ALIGN_VALUES);
        let dyt = &mut rest[skip..][..p * g.width];
        acc.fill(0.0);
        for (x, dy) in x.chunks_exact(image_in).zip(dy.chunks_exact(image_out)) {
            // The image zero-padded with the channels last, so that a run of input channels at
            // one position is a run of values (one address for every broadcast of a position).
            let wp = s.w + 2 * s.padding[1];
            padded.fill(0.0);
            for iy in 0..s.h {
                let at = ((iy + s.padding[0]) * wp + s.padding[1]) * s.c_in;
                transpose(&x[iy * s.w..], s.h * s.w, [s.c_in, s.w], &mut padded[at..], s.c_in);
            }
            // The gradient with the channels last, zero past c_out.
            transpose(dy, p, [s.c_out, p], dyt, g.width);
            let image = Image { g, padded, dyt };
            for &(first, n) in &g.channels {
                match n {
                    4 => image.taps::<S, 4>(simd, first * g.lanes, acc),
                    3 => image.taps::<S, 3>(simd, first * g.lanes, acc),
                    2 => image.taps::<S, 2>(simd, first * g.lanes, acc),
                    _ => image.taps::<S, 1>(simd, first * g.lanes, acc),
                }
            }
        }
    }
}

/// `channels` runs of `positions` values, `stride` apart in `src`, with the channels last into
/// `dst`: `positions` rows of `width >= channels` values, zero past the channels. Through tiles
/// of [`TILE`] channels by [`TILE`] positions: one position at a time (a value from each
/// channel's run), 32 channels of 1,024 positions took 80 us instead of 19.
fn transpose(src: &[f32], stride: usize, [channels, positions]: [usize; 2], dst: &mut [f32], width: usize) {
    for p0 in (0..positions).step_by(TILE) {
        let pn = TILE.min(positions - p0);
        for o0 in (0..channels).step_by(TILE) {
            let on = TILE.min(channels - o0);
            let mut tile = [[0.0f32; TILE]; TILE];
            for (i, line) in tile.iter_mut().enumerate().take(on) {
                line[..pn].copy_from_slice(&src[(o0 + i) * stride + p0..][..pn]);
            }
            for (j, row) in dst[p0 * width..].chunks_mut(width).enumerate().take(pn) {
                for (v, line) in row[o0..o0 + on].iter_mut().zip(&tile) {
                    *v = line[j];
                }
            }
        }
        for row in dst[p0 * width..].chunks_mut(width).take(pn) {
            row[channels..width].fill(0.0);
        }
    }
}

/// One image's padded input and transposed output gradient.
struct Image<'a> {
    g: &'a WeightGrad,
    padded: &'a [f32],
    dyt: &'a [f32],
}

impl Image<'_> {
    /// The channel block from output channel `first` (`V` vectors), every tap, the input
    /// channels in runs of as many as the registers hold.
    #[inline(always)]
    fn taps<S: Simd, const V: usize>(&self, simd: S, first: usize, acc: &mut [f32]) {
        let s = &self.g.s;
        let [oh, ow] = s.out_hw();
        let most = positions(S::F32_LANES, V);
        let tile = (TILE_BYTES / (ow * self.g.width * size_of::<f32>()).max(1)).max(1);
        for (top, (ky, kx)) in (0..oh).step_by(tile).flat_map(|top| s.offsets().map(move |t| (top, t))) {
            let rows = s.inside(0, ky, oh);
            let rows = (rows.0.max(top), rows.1.min(top + tile));
            if rows.0 >= rows.1 {
                continue;
            }
            let tap = Tap { image: self, ky, kx, rows, cols: s.inside(1, kx, ow), first };
            let mut c = 0;
            while c < s.c_in {
                let n = (s.c_in - c).min(most);
                match n {
                    12 => tap.sums::<S, 12, V>(simd, c, acc),
                    11 => tap.sums::<S, 11, V>(simd, c, acc),
                    10 => tap.sums::<S, 10, V>(simd, c, acc),
                    9 => tap.sums::<S, 9, V>(simd, c, acc),
                    8 => tap.sums::<S, 8, V>(simd, c, acc),
                    7 => tap.sums::<S, 7, V>(simd, c, acc),
                    6 => tap.sums::<S, 6, V>(simd, c, acc),
                    5 => tap.sums::<S, 5, V>(simd, c, acc),
                    4 => tap.sums::<S, 4, V>(simd, c, acc),
                    3 => tap.sums::<S, 3, V>(simd, c, acc),
                    2 => tap.sums::<S, 2, V>(simd, c, acc),
                    _ => tap.sums::<S, 1, V>(simd, c, acc),
                }
                c += n;
            }
        }
    }
}

/// One kernel tap of a channel block: the output rows and columns whose tap reads inside the
/// input.
struct Tap<'a> {
    image: &'a Image<'a>,
    ky: usize,
    kx: usize,
    rows: (usize, usize),
    cols: (usize, usize),
    first: usize,
}

impl Tap<'_> {
    /// Input channels `c..c + N` by `V` vectors of output channels: each chain continued from
    /// `acc` over this tap's positions, row by row, and stored back.
    #[inline(always)]
    fn sums<S: Simd, const N: usize, const V: usize>(&self, simd: S, c: usize, acc: &mut [f32]) {
        let (g, lanes) = (self.image.g, S::F32_LANES);
        let s = &g.s;
        let taps = s.kernel[0] * s.kernel[1];
        let wp = s.w + 2 * s.padding[1];
        let t = self.ky * s.kernel[1] + self.kx;
        // Where each input channel's partial sums for this tap and channel block start.
        // Arrays filled by loops rather than `array::from_fn`: in a function this large, LLVM
        // may leave that a call, which returns the accumulators through memory (measured: the
        // direct weight gradients 1.6-2.5x slower).
        let (mut at, zero) = ([0; N], simd.splat_f32s(0.0));
        let mut sums = [[zero; V]; N];
        for (j, (sum, at)) in sums.iter_mut().zip(&mut at).enumerate() {
            *at = ((c + j) * taps + t) * g.width + self.first;
            for (a, &v) in sum.iter_mut().zip(S::as_simd_f32s(&acc[*at..][..V * lanes]).0) {
                *a = v;
            }
        }
        for oy in self.rows.0..self.rows.1 {
            let from = (oy + self.ky) * wp + self.kx;
            for ox in self.cols.0..self.cols.1 {
                let mut d = [zero; V];
                for (d, &v) in d.iter_mut().zip(S::as_simd_f32s(&self.image.dyt[(oy * s.w + ox) * g.width + self.first..][..V * lanes]).0) {
                    *d = v;
                }
                let x = &self.image.padded[(from + ox) * s.c_in + c..][..N];
                for (sum, &x) in sums.iter_mut().zip(x) {
                    let xv = simd.splat_f32s(x);
                    for (a, &dv) in sum.iter_mut().zip(&d) {
                        *a = simd.mul_add_f32s(xv, dv, *a);
                    }
                }
            }
        }
        for (sum, &at) in sums.iter().zip(&at) {
            S::as_mut_simd_f32s(&mut acc[at..][..V * lanes]).0[..V].copy_from_slice(sum);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Scalar, AVX2 and AVX-512 (where the CPU has them) give the same bits.
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        for c_in in [33, 3] {
            same_bits(Conv2d { batch: 3, c_in, h: 8, w: 9, c_out: 37, kernel: [3, 5], stride: [1, 1], padding: [1, 2], dilation: [1, 1] });
        }
    }

    fn same_bits(s: Conv2d) {
        let (nx, _, ny) = s.lens();
        let value = |i: usize, salt: f32| ((i as f32 + salt) * 0.618_034).fract() - 0.5;
        let (x, dy): (Vec<f32>, Vec<f32>) = ((0..nx).map(|i| value(i, 0.1)).collect(), (0..ny).map(|i| value(i, 0.9)).collect());
        // The sums for the output channels, as bits.
        let run = |g: WeightGrad, with: &dyn Fn(Chunk<'_>)| {
            let (mut acc, mut scratch) = (vec![f32::NAN; g.len()], vec![f32::NAN; g.scratch_len()]);
            with(Chunk { g: &g, x: &x, dy: &dy, acc: &mut acc, scratch: &mut scratch });
            acc.chunks_exact(g.width).flat_map(|row| row[..s.c_out].iter().map(|v| v.to_bits())).collect::<Vec<_>>()
        };
        let want = run(WeightGrad::with_lanes(&s, 1).unwrap(), &|c| c.with_simd(pulp::Scalar::new()));
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(simd) = pulp::x86::V3::try_new() {
                assert!(run(WeightGrad::with_lanes(&s, 8).unwrap(), &|c| c.with_simd(simd)) == want, "AVX2, {s:?}");
            }
            #[cfg(feature = "avx512")]
            if let Some(simd) = pulp::x86::V4::try_new() {
                assert!(run(WeightGrad::with_lanes(&s, 16).unwrap(), &|c| c.with_simd(simd)) == want, "AVX-512, {s:?}");
            }
        }
    }
}
