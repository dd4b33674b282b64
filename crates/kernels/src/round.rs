//! Rounding float32 values to a half-precision format and back in one pass: what a cast to
//! bfloat16 or IEEE half and back to float32 gives, bit for bit (the `half` crate's
//! conversions, which Burn's flex casts with: round to nearest, ties to even; fp16 overflows to
//! infinity and underflows through its subnormals to zero; a NaN stays a quiet NaN with the
//! payload bits the format keeps). Mixed-precision training rounds every activation and
//! gradient this way, so the loops are branch-free, vectorised and threaded over runs.

use crate::raw::Out;
use crate::simd::vectorized;

/// A half-precision format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Half {
    /// bfloat16: float32's 8 exponent bits, 7 mantissa bits.
    Bf16,
    /// IEEE binary16: 5 exponent bits, 10 mantissa bits.
    F16,
}

/// `x` as a bfloat16 value, in float32.
#[inline(always)]
pub fn bf16(x: f32) -> f32 {
    let b = x.to_bits();
    let nan = (b & 0x7FFF_FFFF) > 0x7F80_0000;
    let rounded = b.wrapping_add(0x7FFF + ((b >> 16) & 1)) & 0xFFFF_0000;
    let quiet = (b | 0x0040_0000) & 0xFFFF_0000;
    f32::from_bits(if nan { quiet } else { rounded })
}

/// `x` as an IEEE half value, in float32.
#[inline(always)]
pub fn f16(x: f32) -> f32 {
    let b = x.to_bits();
    let (sign, a) = (b & 0x8000_0000, b & 0x7FFF_FFFF);
    // Normal halves: the low 13 mantissa bits rounded off; beyond 65,504, infinity.
    let normal = (a + 0xFFF + ((a >> 13) & 1)) & !0x1FFF;
    let normal = if normal > 0x477F_E000 { 0x7F80_0000 } else { normal };
    // Below 2^-14, multiples of 2^-24: adding 0.5, whose float32 unit is 2^-24, rounds there.
    let tiny = ((f32::from_bits(a) + 0.5) - 0.5).to_bits();
    let magnitude = if a < 0x3880_0000 { tiny } else { normal };
    let nan = sign | 0x7FC0_0000 | (a & 0x007F_E000);
    f32::from_bits(if a > 0x7F80_0000 { nan } else { sign | magnitude })
}

/// `x` rounded to `half`.
#[inline(always)]
pub fn round(x: f32, half: Half) -> f32 {
    match half {
        Half::Bf16 => bf16(x),
        Half::F16 => f16(x),
    }
}

/// Every value of `xs` rounded to `half`, in a new vector (threaded over runs of values).
pub fn round_new(xs: &[f32], half: Half) -> Vec<f32> {
    /// Values per task.
    const RUN: usize = 1 << 15;
    Out::New(xs.len()).write(RUN, |i, out| {
        let xs = &xs[i * RUN..][..out.len()];
        vectorized(
            #[inline(always)]
            || match half {
                Half::Bf16 => out.iter_mut().zip(xs).for_each(|(o, &x)| *o = bf16(x)),
                Half::F16 => out.iter_mut().zip(xs).for_each(|(o, &x)| *o = f16(x)),
            },
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn via_half(x: f32, h: Half) -> f32 {
        match h {
            Half::Bf16 => half::bf16::from_f32(x).to_f32(),
            Half::F16 => half::f16::from_f32(x).to_f32(),
        }
    }

    fn same(x: f32, h: Half) {
        let (got, want) = (round(x, h), via_half(x, h));
        assert_eq!(got.to_bits(), want.to_bits(), "{h:?} {x:e} ({:#010x}): {got:e} vs {want:e}", x.to_bits());
    }

    #[test]
    fn edges_round_as_a_cast_does() {
        let edges = [
            0.0,
            -0.0,
            1.0,
            65504.0,
            65519.99,
            65520.0,
            65536.0,
            1e30,
            3.4e38,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-45,
            6.1035156e-5,
            6.097e-5,
            5.96e-8,
            2.98e-8,
            2.9802322e-8,
            2.9802326e-8,
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-8),
            1.0 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        for x in edges {
            for h in [Half::Bf16, Half::F16] {
                same(x, h);
                same(-x, h);
            }
        }
        for bits in [0x7F80_0001u32, 0x7FC0_1234, 0xFF80_2000, 0x7FBF_FFFF, 0x3880_0000, 0x387F_FFFF, 0x3300_0000, 0x3300_0001] {
            same(f32::from_bits(bits), Half::Bf16);
            same(f32::from_bits(bits), Half::F16);
        }
    }

    #[test]
    fn a_slice_rounds_as_its_values_do() {
        let xs: Vec<f32> = (0..100_000).map(|i| ((i as f32) * 0.37).sin() * 10f32.powi(i % 13 - 8)).collect();
        for h in [Half::Bf16, Half::F16] {
            let got = round_new(&xs, h);
            assert!(got.iter().zip(&xs).all(|(g, &x)| g.to_bits() == via_half(x, h).to_bits()), "{h:?}");
        }
    }

    proptest! {
        #[test]
        fn every_float32_rounds_as_a_cast_does(bits in any::<u32>()) {
            let x = f32::from_bits(bits);
            prop_assert_eq!(bf16(x).to_bits(), via_half(x, Half::Bf16).to_bits());
            prop_assert_eq!(f16(x).to_bits(), via_half(x, Half::F16).to_bits());
        }
    }
}
