//! Properties of flips in the half formats a mixed-precision training run holds its
//! activations and gradients in: bfloat16 (sign 15, exponent 14-7, mantissa 6-0) and IEEE half
//! (sign 15, exponent 14-10, mantissa 9-0), IEEE bit numbering. A flip of bit `b` of a value
//! must give exactly the half value whose word has bit `b` changed, and nothing else.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use proptest::prelude::*;
use resilab_inject::model::{self, value_of};
use resilab_inject::{Dtype, FaultModel, Flip, Mode, Outcome, Plan, Sampling, inject_f32_as};

fn half_format() -> impl Strategy<Value = Dtype> {
    prop_oneof![Just(Dtype::Bf16), Just(Dtype::F16)]
}

/// The f32 value of a half word (exact: both formats are subsets of f32).
fn to_f32(format: Dtype, word: u16) -> f32 {
    match format {
        Dtype::Bf16 => half::bf16::from_bits(word).to_f32(),
        _ => half::f16::from_bits(word).to_f32(),
    }
}

/// The half word of an f32 (round to nearest even).
fn word_of(format: Dtype, x: f32) -> u16 {
    match format {
        Dtype::Bf16 => half::bf16::from_f32(x).to_bits(),
        _ => half::f16::from_f32(x).to_bits(),
    }
}

/// A plan that flips exactly IEEE bit `b` of a 16-bit word in one attempt.
fn one_bit(b: u32) -> Plan {
    let r = 15 - b; // reference numbering: 0 = sign
    let model = FaultModel {
        mode: Mode::BitRange { first: Some(r), last: Some(r), burst: 1 },
        // The sign bit is a candidate exactly when it is the bit asked for.
        allow_sign_change: r == 0,
        ..FaultModel::default()
    };
    Plan { model, probability: 1.0, attempts: 1, sampling: Sampling::PerTensor }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, .. ProptestConfig::default() })]

    /// At the word level, every word (NaNs, infinities and subnormals included): the flip
    /// changes bit `b` and nothing else, and the value is the format's value of that word.
    #[test]
    fn a_flip_of_a_half_word_changes_exactly_that_bit(format in half_format(), word in any::<u16>(), b in 0u32..16) {
        let new = model::apply(format, u64::from(word), &Flip::Xor { precision: 16, mask: 1 << b }).unwrap();
        prop_assert_eq!(new, u64::from(word ^ (1 << b)));
        let (got, want) = (value_of(format, new), f64::from(to_f32(format, word ^ (1 << b))));
        prop_assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{} vs {}", got, want);
    }

    /// Through the in-memory injector, on an f32 tensor: the value hit becomes exactly the half
    /// value with bit `b` changed (of its half rounding, when it is not a half value, as a
    /// float32 gradient average is not), the record says so in the half format's terms, and
    /// every other value keeps its f32 bits.
    #[test]
    fn a_flip_in_a_tensor_is_the_half_flip_and_nothing_else(
        format in half_format(),
        word in any::<u16>(),
        b in 0u32..16,
        others in prop::collection::vec(any::<u32>(), 0..6),
        seed in any::<u64>(),
    ) {
        let word = if to_f32(format, word).is_nan() { 0x0001 } else { word };
        let mut v: Vec<f32> = std::iter::once(to_f32(format, word)).chain(others.iter().map(|&o| f32::from_bits(o))).collect();
        let before = v.clone();
        let recs = inject_f32_as(&Plan { sampling: Sampling::PerElement, ..one_bit(b) }, &mut [("t", &mut v[..])], seed, format);
        prop_assert_eq!(recs.len(), 1);
        let r = &recs[0];
        let old = word_of(format, before[r.index]);
        prop_assert!(r.index > 0 || old == word);
        let flipped = old ^ (1 << b);
        let want = to_f32(format, flipped);
        for (i, (got, was)) in v.iter().zip(&before).enumerate() {
            if i == r.index {
                prop_assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{} -> {} want {}", was, got, want);
            } else {
                prop_assert_eq!(got.to_bits(), was.to_bits(), "value {} is not hit", i);
            }
        }
        prop_assert_eq!(r.outcome, Outcome::Corrupted);
        prop_assert_eq!(r.dtype.as_str(), if format == Dtype::Bf16 { "bf16" } else { "f16" });
        prop_assert_eq!(r.precision, Some(16));
        prop_assert_eq!(&r.bits_ieee, &vec![b]);
        prop_assert_eq!(&r.bits_reference, &vec![15 - b]);
        prop_assert_eq!(&r.stored_bits_changed, &vec![b]);
        prop_assert_eq!(&r.old_bits, &format!("0x{old:04x}"));
        prop_assert_eq!(&r.new_bits, &format!("0x{flipped:04x}"));
        let old_value = f64::from(to_f32(format, old));
        prop_assert!(r.old.0.to_bits() == old_value.to_bits() || (r.old.0.is_nan() && old_value.is_nan()));
        prop_assert!(r.new.0.to_bits() == f64::from(want).to_bits() || (r.new.0.is_nan() && want.is_nan()));
    }

    /// Several values, flips drawn over the whole word: each corrupted value is its half word
    /// with the logged bits changed, the others are untouched.
    #[test]
    fn drawn_flips_change_the_logged_half_bits_only(
        format in half_format(),
        words in prop::collection::vec(any::<u16>(), 1..20),
        seed in any::<u64>(),
        burst in 1u32..4,
    ) {
        let words: Vec<u16> = words.into_iter().map(|w| if to_f32(format, w).is_nan() { 0 } else { w }).collect();
        let xs: Vec<f32> = words.iter().map(|&w| to_f32(format, w)).collect();
        let mut v = xs.clone();
        let plan = Plan {
            model: FaultModel { mode: Mode::BitRange { first: None, last: None, burst }, ..FaultModel::default() },
            probability: 1.0,
            attempts: 3,
            sampling: Sampling::PerElement,
        };
        let recs = inject_f32_as(&plan, &mut [("t", &mut v[..])], seed, format);
        let mut want: Vec<u16> = words.clone();
        for r in recs.iter().filter(|r| r.outcome == Outcome::Corrupted) {
            prop_assert!(r.bits_ieee.len() == burst as usize && r.bits_ieee.iter().all(|&b| b < 16));
            want[r.index] ^= r.bits_ieee.iter().fold(0u16, |m, b| m | 1 << b);
        }
        for (i, (&got, &w)) in v.iter().zip(&want).enumerate() {
            let exp = to_f32(format, w);
            if w == words[i] {
                prop_assert_eq!(got.to_bits(), xs[i].to_bits(), "untouched {}", i);
            } else {
                prop_assert!(got.to_bits() == exp.to_bits() || (got.is_nan() && exp.is_nan()), "{}: {} want {}", i, got, exp);
                prop_assert!(exp.is_nan() || word_of(format, got) == w);
            }
        }
    }
}

#[test]
fn the_layouts_put_sign_exponent_and_mantissa_where_each_format_has_them() {
    let flip = |format, x: f32, b: u32| {
        let mut v = [x];
        inject_f32_as(&one_bit(b), &mut [("t", &mut v[..])], 1, format);
        v[0]
    };
    for format in [Dtype::Bf16, Dtype::F16] {
        assert_eq!(flip(format, 1.0, 15), -1.0, "{format}: sign");
        assert_eq!(flip(format, 1.0, 14), f32::INFINITY, "{format}: top exponent bit of 1.0 gives the all-ones exponent");
        assert_eq!(flip(format, 2.0, 14), 0.0, "{format}: and of 2.0 the zero exponent");
    }
    // The lowest exponent bit and the top mantissa bit: 7 and 6 in bf16, 10 and 9 in fp16.
    assert_eq!(flip(Dtype::Bf16, 1.0, 7), 0.5);
    assert_eq!(flip(Dtype::Bf16, 1.0, 6), 1.5);
    assert_eq!(flip(Dtype::Bf16, 1.0, 0), 1.0 + 2f32.powi(-7));
    assert_eq!(flip(Dtype::F16, 1.0, 10), 0.5);
    assert_eq!(flip(Dtype::F16, 1.0, 9), 1.5);
    assert_eq!(flip(Dtype::F16, 1.0, 0), 1.0 + 2f32.powi(-10));
    // fp16's exponent tops out at 2^15: its lowest exponent bit flipped there is Inf, in bf16 2^16.
    assert_eq!(flip(Dtype::F16, 32768.0, 10), f32::INFINITY);
    assert_eq!(flip(Dtype::Bf16, 32768.0, 7), 65536.0);
    // A bf16 subnormal's lowest bit, and fp16's smallest subnormal.
    assert_eq!(flip(Dtype::Bf16, 0.0, 0), 2f32.powi(-133));
    assert_eq!(flip(Dtype::F16, 0.0, 0), 2f32.powi(-24));
}

#[test]
fn bf16_encoding_from_f64_rounds_correctly_just_above_a_tie() {
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7; 2^-40 more must round up. Those bits lie in
    // the f64's low 32, which `half`'s own f64 conversion drops.
    let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
    assert_eq!(model::encode_float(x, Dtype::Bf16), 0x3f81);
    assert_eq!(model::encode_float(1.0 + 2f64.powi(-8), Dtype::Bf16), 0x3f80, "an exact tie goes to the even word");
    assert_eq!(model::encode_float(-(1.0 + 2f64.powi(-8) + 2f64.powi(-40)), Dtype::Bf16), 0xbf81);
    assert_eq!(model::encode_float(1e300, Dtype::Bf16), 0x7f80);
    assert_eq!(model::encode_float(1e-300, Dtype::Bf16), 0x0000);
    assert!(value_of(Dtype::Bf16, model::encode_float(f64::NAN, Dtype::Bf16)).is_nan());
}
