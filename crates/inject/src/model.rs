//! The fault model: how one value is corrupted.
//!
//! # Bit numbering
//! Two numberings are used and both are logged:
//! - **reference** numbering (the published injector's, and the one of `first_bit`, `last_bit`
//!   and `bit_mask` in configs): bits of the big-endian word from the left, **0 = sign**, then
//!   the exponent, then the mantissa;
//! - **IEEE** numbering: bit 0 is the least significant bit of the word.
//!
//! For a `P`-bit word, reference index `i` is IEEE bit `P - 1 - i`. The most significant exponent
//! bit is reference 1 = IEEE 14 / 30 / 62 for 16 / 32 / 64 bits.
//!
//! # Precision
//! A float is converted to the fault model's precision `P` (16, 32 or 64 bits, or the stored
//! type's own with `Auto`), corrupted there, and converted back to the stored type with
//! round-to-nearest-even (as numpy casts), so a flip in a low mantissa bit of a 64-bit view of an
//! f32 may vanish. NaN/Inf checks look at the **stored** value.
//!
//! A `P`-bit view of a value stored at `P` bits is its own word: for [`Dtype::Bf16`] (a value
//! of a bf16 training run) the 16-bit word is bfloat16's (sign 15, exponent 14-7, mantissa
//! 6-0, IEEE numbering), for [`Dtype::F16`] IEEE half's (sign 15, exponent 14-10, mantissa
//! 9-0). The 16-bit view of any other type is IEEE half, as in the published injector.
//!
//! # Integers
//! As in the reference: one random bit of the shortest binary form of `|v|` is flipped and the
//! sign is kept; `P` is then that form's length (so the reference index is counted from its
//! leftmost 1). A result the stored type cannot hold is rejected.

use rand::{Rng, seq::index};
use resilab_h5::Dtype;
use serde::{Deserialize, Serialize};

/// The precision at which floats are corrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// The stored type's own width.
    Auto,
    /// IEEE half precision.
    #[serde(rename = "16")]
    P16,
    /// IEEE single precision.
    #[serde(rename = "32")]
    P32,
    /// IEEE double precision.
    #[serde(rename = "64")]
    P64,
}

impl Precision {
    /// Word width used for a float stored as `dtype`.
    pub fn bits_for(self, dtype: Dtype) -> u32 {
        match self {
            Precision::Auto => dtype.bits(),
            Precision::P16 => 16,
            Precision::P32 => 32,
            Precision::P64 => 64,
        }
    }
    /// The fixed width, `None` for `Auto`.
    pub fn fixed(self) -> Option<u32> {
        match self {
            Precision::Auto => None,
            p => Some(p.bits_for(Dtype::Other)),
        }
    }
}

/// How a selected value is corrupted.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// Flip `burst` distinct bits drawn uniformly from reference indices `first..=last`.
    BitRange {
        /// First reference bit (`None`: 0).
        first: Option<u32>,
        /// Last reference bit (`None`: `P - 1`).
        last: Option<u32>,
        /// Number of distinct bits flipped in one value.
        burst: u32,
    },
    /// XOR with a pattern (leftmost character first) placed at a uniform random legal offset.
    BitMask {
        /// The pattern, `true` for `1`.
        pattern: Vec<bool>,
    },
    /// Multiply by a factor.
    Scaling {
        /// The factor.
        factor: f64,
    },
}

/// One fault model: a mode and the rules around it.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultModel {
    /// How a value is corrupted.
    pub mode: Mode,
    /// Precision at which floats are corrupted.
    pub precision: Precision,
    /// Whether the sign bit may flip (bit range: the sign bit joins or leaves the candidate
    /// bits; bit mask: offsets that put a `1` on the sign are legal or not).
    pub allow_sign_change: bool,
    /// Whether a corruption may leave NaN or ±Inf in the stored value.
    pub allow_nan: bool,
    /// Redraws (of bits or mask offset) allowed when a draw gives NaN/Inf and that is not allowed.
    pub max_redraws: u32,
    /// A finite value whose magnitude exceeds this counts as extreme.
    pub extreme_threshold: f64,
}

impl Default for FaultModel {
    fn default() -> Self {
        Self {
            mode: Mode::BitRange { first: None, last: None, burst: 1 },
            precision: Precision::Auto,
            allow_sign_change: true,
            allow_nan: true,
            max_redraws: 100,
            extreme_threshold: 1e10,
        }
    }
}

/// What was done to one value, enough to redo it exactly.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flip {
    /// XOR of a float's `precision`-bit view with `mask` (IEEE numbering).
    Xor {
        /// Width of the word the mask applies to.
        precision: u32,
        /// The flipped bits.
        mask: u64,
    },
    /// Flip of IEEE bit `bit` of an integer's magnitude.
    IntBit {
        /// The bit (0 = least significant) of `|v|`.
        bit: u32,
    },
    /// Multiplication by `factor`.
    Scale {
        /// The factor.
        factor: f64,
    },
}

/// The result of corrupting one value.
#[derive(Clone, Debug, PartialEq)]
pub struct Corruption {
    /// The flip applied (the last one drawn when rejected).
    pub flip: Flip,
    /// The new stored bit pattern; `None` when rejected.
    pub new_raw: Option<u64>,
    /// Draws thrown away because they gave NaN/Inf.
    pub redraws: u32,
}

impl Flip {
    /// The flipped bits, IEEE numbering, and the width of the word they belong to.
    pub fn bits_ieee(&self, old_raw: u64, dtype: Dtype) -> (Vec<u32>, u32) {
        match *self {
            Flip::Xor { precision, mask } => (bit_list(mask), precision),
            Flip::IntBit { bit } => (vec![bit], int_form_len(old_raw, dtype)),
            Flip::Scale { .. } => (Vec::new(), 0),
        }
    }
}

/// Positions of the set bits of `mask`, ascending.
pub fn bit_list(mut mask: u64) -> Vec<u32> {
    let mut out = Vec::with_capacity(mask.count_ones() as usize);
    while mask != 0 {
        out.push(mask.trailing_zeros());
        mask &= mask - 1;
    }
    out
}

/// Reference indices of IEEE bits in a `width`-bit word, in the same order.
pub fn to_reference(bits_ieee: &[u32], width: u32) -> Vec<u32> {
    bits_ieee.iter().map(|&b| width - 1 - b).collect()
}

/// The value a stored bit pattern stands for, as f64 (exact for every supported type but
/// 64-bit integers beyond 2^53).
pub fn value_of(dtype: Dtype, raw: u64) -> f64 {
    match dtype {
        Dtype::F16 => half::f16::from_bits(raw as u16).to_f64(),
        Dtype::Bf16 => half::bf16::from_bits(raw as u16).to_f64(),
        Dtype::F32 => f32::from_bits(raw as u32) as f64,
        Dtype::F64 => f64::from_bits(raw),
        Dtype::Int(_) => signed(raw, dtype) as f64,
        Dtype::Uint(_) => raw as f64,
        Dtype::Other => f64::NAN,
    }
}

fn signed(raw: u64, dtype: Dtype) -> i128 {
    let w = dtype.bits();
    let shift = 64 - w;
    (((raw << shift) as i64) >> shift) as i128
}

fn int_fits(v: i128, dtype: Dtype) -> Option<u64> {
    let w = dtype.bits();
    let (lo, hi) = match dtype {
        Dtype::Int(_) => (-(1i128 << (w - 1)), (1i128 << (w - 1)) - 1),
        _ => (0, if w == 64 { u64::MAX as i128 } else { (1i128 << w) - 1 }),
    };
    if v < lo || v > hi {
        return None;
    }
    let mask = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
    Some((v as i64 as u64) & mask)
}

fn magnitude(raw: u64, dtype: Dtype) -> (u128, bool) {
    match dtype {
        Dtype::Int(_) => {
            let v = signed(raw, dtype);
            (v.unsigned_abs(), v < 0)
        }
        _ => (raw as u128, false),
    }
}

/// Length of the shortest binary form of an integer's magnitude (1 for zero, as Python's `bin`).
pub fn int_form_len(raw: u64, dtype: Dtype) -> u32 {
    let (m, _) = magnitude(raw, dtype);
    (128 - m.leading_zeros()).max(1)
}

/// Bit pattern of a stored float seen at `p` bits.
fn to_precision(dtype: Dtype, raw: u64, p: u32) -> u64 {
    if dtype.bits() == p {
        return raw;
    }
    let x = value_of(dtype, raw);
    match p {
        16 => half::f16::from_f64(x).to_bits() as u64,
        32 => (x as f32).to_bits() as u64,
        _ => x.to_bits(),
    }
}

/// Stored bit pattern of a `p`-bit float cast back to `dtype`.
fn from_precision(bits: u64, p: u32, dtype: Dtype) -> u64 {
    if dtype.bits() == p {
        return bits;
    }
    let x = match p {
        16 => half::f16::from_bits(bits as u16).to_f64(),
        32 => f32::from_bits(bits as u32) as f64,
        _ => f64::from_bits(bits),
    };
    encode_float(x, dtype)
}

/// The stored bit pattern of `x` as a float of type `dtype` (round to nearest even; NaN stays
/// NaN, a magnitude beyond the type's range becomes ±Inf).
pub fn encode_float(x: f64, dtype: Dtype) -> u64 {
    match dtype {
        Dtype::F16 => half::f16::from_f64(x).to_bits() as u64,
        Dtype::Bf16 => bf16_bits(x) as u64,
        Dtype::F32 => (x as f32).to_bits() as u64,
        _ => x.to_bits(),
    }
}

/// bfloat16's bits of `x`, correctly rounded (to nearest, ties to even). `half`'s own
/// conversion from f64 drops the low 32 bits of the f64 before rounding, which can turn a value
/// just above a tie into a tie; this rounds to float32 first with round-to-odd, which keeps
/// enough of them for the second rounding to be exact.
fn bf16_bits(x: f64) -> u16 {
    let r = x as f32;
    if x.is_nan() || f64::from(r) == x {
        return half::bf16::from_f32(r).to_bits();
    }
    // Toward zero, then the last bit set: float32 rounded to odd.
    let t = if f64::from(r).abs() > x.abs() { f32::from_bits(r.to_bits() - 1) } else { r };
    half::bf16::from_f32(f32::from_bits(t.to_bits() | 1)).to_bits()
}

/// Applies a recorded flip to a stored value: the new bit pattern, or `None` when the stored
/// type cannot hold the result (integers) or the flip does not fit the value's type.
pub fn apply(dtype: Dtype, raw: u64, flip: &Flip) -> Option<u64> {
    match *flip {
        Flip::Xor { precision, mask } => {
            if !dtype.is_float() || !matches!(precision, 16 | 32 | 64) || (precision < 64 && mask >> precision != 0) {
                return None;
            }
            Some(from_precision(to_precision(dtype, raw, precision) ^ mask, precision, dtype))
        }
        Flip::IntBit { bit } => {
            if dtype.is_float() || !dtype.is_numeric() || bit >= 127 {
                return None;
            }
            let (m, neg) = magnitude(raw, dtype);
            let flipped = (m ^ (1u128 << bit)) as i128;
            int_fits(if neg { -flipped } else { flipped }, dtype)
        }
        Flip::Scale { factor } => {
            if dtype.is_float() {
                Some(encode_float(value_of(dtype, raw) * factor, dtype))
            } else if dtype.is_numeric() {
                let v = (value_of(dtype, raw) * factor).trunc();
                if !v.is_finite() || v.abs() > 1.8e19 {
                    return None;
                }
                int_fits(v as i128, dtype)
            } else {
                None
            }
        }
    }
}

/// Whether a stored value is NaN.
pub fn is_nan(dtype: Dtype, raw: u64) -> bool {
    dtype.is_float() && value_of(dtype, raw).is_nan()
}

/// Whether a stored value is ±Inf.
pub fn is_inf(dtype: Dtype, raw: u64) -> bool {
    dtype.is_float() && value_of(dtype, raw).is_infinite()
}

impl FaultModel {
    /// Candidate reference bits of a bit range at width `p`: `first..=last`, with the sign bit
    /// added (`allow_sign_change`) or removed (otherwise).
    pub fn range_bits(&self, p: u32) -> Vec<u32> {
        let Mode::BitRange { first, last, .. } = self.mode else { return Vec::new() };
        let (first, last) = (first.unwrap_or(0), last.unwrap_or(p - 1).min(p - 1));
        let mut bits: Vec<u32> = (first..=last).filter(|&b| b != 0).collect();
        if self.allow_sign_change {
            bits.insert(0, 0);
        }
        bits
    }

    /// Legal offsets (reference index of the pattern's first character) of the bit mask at width `p`.
    pub fn mask_offsets(&self, p: u32) -> Vec<u32> {
        let Mode::BitMask { pattern } = &self.mode else { return Vec::new() };
        let len = pattern.len() as u32;
        if len > p {
            return Vec::new();
        }
        (0..=p - len).filter(|&o| self.allow_sign_change || o > 0 || !pattern[0]).collect()
    }

    /// Why this model cannot corrupt a float stored at width `p`, if it cannot.
    pub fn check_width(&self, p: u32) -> Result<(), String> {
        match &self.mode {
            Mode::BitRange { first, last, burst } => {
                if let Some(l) = last.filter(|&l| l >= p) {
                    return Err(format!("last_bit {l} is outside a {p}-bit word (reference bits 0..={}, 0 = sign)", p - 1));
                }
                if let Some(f) = first.filter(|&f| f >= p) {
                    return Err(format!("first_bit {f} is outside a {p}-bit word (reference bits 0..={}, 0 = sign)", p - 1));
                }
                let n = self.range_bits(p).len() as u32;
                if *burst > n {
                    return Err(format!(
                        "burst {burst} is larger than the {n} candidate bit(s) of the range at {p} bits; bits of one value are distinct"
                    ));
                }
                Ok(())
            }
            Mode::BitMask { pattern } => {
                if pattern.len() as u32 > p {
                    return Err(format!("bit_mask has {} bits, longer than the {p}-bit word", pattern.len()));
                }
                if self.mask_offsets(p).is_empty() {
                    return Err("bit_mask can only be placed over the sign bit, and allow_sign_change is false".into());
                }
                Ok(())
            }
            Mode::Scaling { .. } => Ok(()),
        }
    }

    fn draw_flip(&self, dtype: Dtype, raw: u64, rng: &mut impl Rng) -> Flip {
        if let Mode::Scaling { factor } = self.mode {
            return Flip::Scale { factor };
        }
        if !dtype.is_float() {
            return Flip::IntBit { bit: rng.random_range(0..int_form_len(raw, dtype)) };
        }
        let p = self.precision.bits_for(dtype);
        let mask = match &self.mode {
            Mode::BitRange { burst, .. } => {
                let bits = self.range_bits(p);
                index::sample(rng, bits.len(), *burst as usize).iter().fold(0u64, |m, i| m | 1 << (p - 1 - bits[i]))
            }
            Mode::BitMask { pattern } => {
                let offsets = self.mask_offsets(p);
                let o = offsets[rng.random_range(0..offsets.len())];
                pattern.iter().enumerate().filter(|(_, b)| **b).fold(0u64, |m, (j, _)| m | 1 << (p - 1 - (o + j as u32)))
            }
            Mode::Scaling { .. } => 0,
        };
        Flip::Xor { precision: p, mask }
    }

    /// Corrupts one stored value. The caller must have checked the width with
    /// [`FaultModel::check_width`] for floats.
    pub fn corrupt(&self, dtype: Dtype, raw: u64, rng: &mut impl Rng) -> Corruption {
        let mut redraws = 0;
        loop {
            let flip = self.draw_flip(dtype, raw, rng);
            let new_raw = apply(dtype, raw, &flip);
            let bad = new_raw.is_none_or(|n| !self.allow_nan && (is_nan(dtype, n) || is_inf(dtype, n)));
            if !bad {
                return Corruption { flip, new_raw, redraws };
            }
            // Scaling and integer overflow are deterministic: redrawing cannot help.
            if redraws >= self.max_redraws || matches!(flip, Flip::Scale { .. }) || new_raw.is_none() {
                return Corruption { flip, new_raw: None, redraws };
            }
            redraws += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn critical_bit_is_reference_one() {
        let m = FaultModel { mode: Mode::BitRange { first: Some(1), last: Some(1), burst: 1 }, ..Default::default() };
        let m = FaultModel { allow_sign_change: false, ..m };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let c = m.corrupt(Dtype::F32, 1.0f32.to_bits() as u64, &mut rng);
        assert_eq!(c.flip, Flip::Xor { precision: 32, mask: 1 << 30 });
        assert!(is_inf(Dtype::F32, c.new_raw.unwrap()));
        let c = m.corrupt(Dtype::F16, half::f16::from_f32(0.5).to_bits() as u64, &mut rng);
        assert_eq!(c.flip, Flip::Xor { precision: 16, mask: 1 << 14 });
        let c = m.corrupt(Dtype::F64, 0.25f64.to_bits(), &mut rng);
        assert_eq!(c.flip, Flip::Xor { precision: 64, mask: 1 << 62 });
        assert_eq!(f64::from_bits(c.new_raw.unwrap()), 2f64.powi(1022));
    }

    #[test]
    fn nan_free_redraws_are_bounded_and_reported() {
        // Only the critical bit is a candidate: 1.0 becomes Inf every time, so it is rejected.
        let m = FaultModel {
            mode: Mode::BitRange { first: Some(1), last: Some(1), burst: 1 },
            allow_sign_change: false,
            allow_nan: false,
            max_redraws: 5,
            ..Default::default()
        };
        let c = m.corrupt(Dtype::F32, 1.0f32.to_bits() as u64, &mut ChaCha8Rng::seed_from_u64(1));
        assert_eq!((c.new_raw, c.redraws), (None, 5));
    }

    #[test]
    fn f64_view_of_f32_checks_the_stored_value() {
        // Flipping f64 exponent bit 59 of 2.0 gives 2^129: finite in f64, Inf once stored as f32.
        let flip = Flip::Xor { precision: 64, mask: 1 << 59 };
        assert!(f64::from_bits(2.0f64.to_bits() ^ 1 << 59).is_finite());
        let new = apply(Dtype::F32, 2.0f32.to_bits() as u64, &flip).unwrap();
        assert!(is_inf(Dtype::F32, new));
        // A low mantissa bit of the f64 view vanishes in the f32.
        let new = apply(Dtype::F32, 1.0f32.to_bits() as u64, &Flip::Xor { precision: 64, mask: 1 }).unwrap();
        assert_eq!(new, 1.0f32.to_bits() as u64);
    }

    #[test]
    fn integers_flip_a_bit_of_the_magnitude_and_keep_the_sign() {
        let d = Dtype::Int(8);
        let raw = (-5i64) as u64; // |v| = 101
        assert_eq!(int_form_len(raw, d), 3);
        assert_eq!(apply(d, raw, &Flip::IntBit { bit: 1 }).map(|r| r as i64), Some(-7));
        assert_eq!(apply(Dtype::Uint(8), 0, &Flip::IntBit { bit: 0 }), Some(1));
        assert_eq!(apply(Dtype::Int(1), 0x80, &Flip::IntBit { bit: 0 }), None, "-129 does not fit an i8");
        assert_eq!(apply(Dtype::Int(2), 0xfffe, &Flip::IntBit { bit: 0 }), Some(0xfffd));
    }

    #[test]
    fn mask_offsets_respect_the_sign_rule() {
        let m = FaultModel { mode: Mode::BitMask { pattern: vec![true, false, true] }, ..Default::default() };
        assert_eq!(m.mask_offsets(16), (0..=13).collect::<Vec<_>>());
        let m = FaultModel { allow_sign_change: false, ..m };
        assert_eq!(m.mask_offsets(16), (1..=13).collect::<Vec<_>>());
        assert!(m.check_width(2).is_err());
    }
}
