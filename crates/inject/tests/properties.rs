//! Properties of the bit-level fault model and of the attempt sampling.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use resilab_h5::Dtype;
use resilab_inject::model::{self, is_inf, is_nan, value_of};
use resilab_inject::run::{self, Draw};
use resilab_inject::{FaultModel, Flip, Mode, Outcome, Plan, Precision, Sampling, Target};

fn float_dtype() -> impl Strategy<Value = Dtype> {
    prop_oneof![Just(Dtype::F16), Just(Dtype::F32), Just(Dtype::F64)]
}

fn raw_for(dtype: Dtype, bits: u64) -> u64 {
    match dtype.bits() {
        64 => bits,
        w => bits & ((1u64 << w) - 1),
    }
}

fn precision() -> impl Strategy<Value = Precision> {
    prop_oneof![Just(Precision::Auto), Just(Precision::P16), Just(Precision::P32), Just(Precision::P64)]
}

/// The `p`-bit word of a stored float (numpy's cast, round to nearest even).
fn view(dtype: Dtype, raw: u64, p: u32) -> u64 {
    let x = value_of(dtype, raw);
    match p {
        16 => half::f16::from_f64(x).to_bits() as u64,
        32 => (x as f32).to_bits() as u64,
        _ => x.to_bits(),
    }
}

/// A `p`-bit word cast back to the stored type.
fn unview(word: u64, p: u32, dtype: Dtype) -> u64 {
    let x = match p {
        16 => half::f16::from_bits(word as u16).to_f64(),
        32 => f32::from_bits(word as u32) as f64,
        _ => f64::from_bits(word),
    };
    match dtype {
        Dtype::F16 => half::f16::from_f64(x).to_bits() as u64,
        Dtype::F32 => (x as f32).to_bits() as u64,
        _ => x.to_bits(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Bit range: the flipped bits are distinct, inside the range (plus the sign bit when
    /// allowed), and at the model's precision the new word differs from the old in exactly them.
    #[test]
    fn bit_range_flips_exactly_the_logged_bits(
        dtype in float_dtype(), bits in any::<u64>(), prec in precision(),
        first in 0u32..16, span in 0u32..16, burst in 1u32..4, sign in any::<bool>(), seed in any::<u64>(),
    ) {
        let raw = raw_for(dtype, bits);
        let p = prec.bits_for(dtype);
        let last = (first + span).min(p - 1);
        prop_assume!(first <= last);
        let m = FaultModel { mode: Mode::BitRange { first: Some(first), last: Some(last), burst }, precision: prec, allow_sign_change: sign, ..Default::default() };
        prop_assume!(m.check_width(p).is_ok());
        let c = m.corrupt(dtype, raw, &mut ChaCha8Rng::seed_from_u64(seed));
        let Flip::Xor { precision, mask } = c.flip else { panic!("not a xor") };
        prop_assert_eq!(precision, p);
        let flipped = model::bit_list(mask);
        prop_assert_eq!(flipped.len() as u32, burst);
        for b in &flipped {
            let reference = p - 1 - b;
            prop_assert!((first..=last).contains(&reference) || (sign && reference == 0), "bit {} outside {}..={}", reference, first, last);
            prop_assert!(sign || reference != 0, "sign bit flipped though not allowed");
        }
        let new = c.new_raw.expect("NaN allowed, so never rejected");
        if dtype.bits() == p {
            prop_assert_eq!(raw ^ new, mask, "stored word must differ in exactly the logged bits");
        } else {
            // At another precision: the p-bit view of the old value, flipped in exactly the
            // logged bits, cast back.
            prop_assert_eq!(new, unview(view(dtype, raw, p) ^ mask, p, dtype));
        }
    }

    /// With NaN/Inf refused, no corruption leaves NaN or Inf in the stored value.
    #[test]
    fn nan_free_corruptions_are_finite(dtype in float_dtype(), x in -1e3f64..1e3, prec in precision(), burst in 1u32..3, seed in any::<u64>()) {
        let raw = match dtype { Dtype::F16 => half::f16::from_f64(x).to_bits() as u64, Dtype::F32 => (x as f32).to_bits() as u64, _ => x.to_bits() };
        let m = FaultModel { mode: Mode::BitRange { first: None, last: None, burst }, precision: prec, allow_nan: false, max_redraws: 20, ..Default::default() };
        let c = m.corrupt(dtype, raw, &mut ChaCha8Rng::seed_from_u64(seed));
        if let Some(new) = c.new_raw {
            prop_assert!(!is_nan(dtype, new) && !is_inf(dtype, new));
        }
        prop_assert!(c.redraws <= 20);
    }

    /// Bit mask: the flipped word is the pattern at a legal offset, so the flipped bits are the
    /// pattern's ones shifted.
    #[test]
    fn bit_mask_is_the_pattern_at_a_legal_offset(dtype in float_dtype(), bits in any::<u64>(), pattern in proptest::collection::vec(any::<bool>(), 1..12), sign in any::<bool>(), seed in any::<u64>()) {
        prop_assume!(pattern.iter().any(|b| *b));
        let raw = raw_for(dtype, bits);
        let p = dtype.bits();
        let m = FaultModel { mode: Mode::BitMask { pattern: pattern.clone() }, allow_sign_change: sign, ..Default::default() };
        prop_assume!(m.check_width(p).is_ok());
        let c = m.corrupt(dtype, raw, &mut ChaCha8Rng::seed_from_u64(seed));
        let Flip::Xor { mask, .. } = c.flip else { panic!("not a xor") };
        let legal = m.mask_offsets(p);
        let found = legal.iter().any(|&o| {
            let want = pattern.iter().enumerate().filter(|(_, b)| **b).fold(0u64, |acc, (j, _)| acc | 1 << (p - 1 - (o + j as u32)));
            want == mask
        });
        prop_assert!(found, "mask {:#x} is not the pattern at a legal offset", mask);
        prop_assert_eq!(raw ^ c.new_raw.unwrap(), mask);
    }

    /// Integers: one bit of the magnitude's binary form flips and the sign stays.
    #[test]
    fn integers_keep_their_sign(v in any::<i32>(), seed in any::<u64>()) {
        let d = Dtype::Int(4);
        let raw = v as u32 as u64;
        let c = FaultModel::default().corrupt(d, raw, &mut ChaCha8Rng::seed_from_u64(seed));
        let Flip::IntBit { bit } = c.flip else { panic!("not an int flip") };
        prop_assert!(bit < model::int_form_len(raw, d));
        if let Some(new) = c.new_raw {
            let n = new as u32 as i32;
            prop_assert_eq!((n as i64).unsigned_abs() ^ (v as i64).unsigned_abs(), 1u64 << bit);
            prop_assert!(n == 0 || v == 0 || (n < 0) == (v < 0));
        }
    }
}

/// Every legal offset of a mask is used, and no other.
#[test]
fn mask_placement_covers_every_legal_offset() {
    for (sign, want) in [(true, (0..=13).collect::<BTreeSet<u32>>()), (false, (1..=13).collect())] {
        let m = FaultModel { mode: Mode::BitMask { pattern: vec![true, true, false] }, allow_sign_change: sign, ..Default::default() };
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut seen = BTreeSet::new();
        for _ in 0..2000 {
            let c = m.corrupt(Dtype::F16, 0x3c00, &mut rng);
            let Flip::Xor { mask, .. } = c.flip else { unreachable!() };
            seen.insert(15 - (63 - mask.leading_zeros()));
        }
        assert_eq!(seen, want, "allow_sign_change = {sign}");
    }
}

fn targets(sizes: &[usize]) -> Vec<Target> {
    sizes.iter().enumerate().map(|(i, &len)| Target { path: format!("/t{i}"), dtype: Dtype::F32, len }).collect()
}

fn plan(attempts: u64, probability: f64, sampling: Sampling) -> Plan {
    Plan { model: FaultModel::default(), probability, attempts, sampling }
}

/// With probability p, the number of corruptions is Binomial(attempts, p): for several p and
/// fixed seeds it lies within 4 standard deviations of the mean, and over 40 seeds its mean and
/// variance match n p and n p (1 - p) within sampling error.
#[test]
fn corruption_count_is_binomial() {
    let t = targets(&[1000]);
    let n = 2000u64;
    for p in [0.01, 0.1, 0.5, 0.9] {
        let counts: Vec<f64> = (0..40)
            .map(|seed| run::draw(&plan(n, p, Sampling::PerTensor), &t, seed).iter().filter(|d| d.selected).count() as f64)
            .collect();
        let (mean, var) = (n as f64 * p, n as f64 * p * (1.0 - p));
        for c in &counts {
            assert!((c - mean).abs() < 4.0 * var.sqrt(), "p={p}: count {c}, mean {mean}");
        }
        let m = counts.iter().sum::<f64>() / counts.len() as f64;
        let v = counts.iter().map(|c| (c - m).powi(2)).sum::<f64>() / (counts.len() - 1) as f64;
        // Standard error of the mean of 40 counts is sqrt(var / 40); of the variance, about var * sqrt(2 / 39).
        assert!((m - mean).abs() < 4.0 * (var / 40.0).sqrt(), "p={p}: mean {m} vs {mean}");
        assert!((v - var).abs() < 4.0 * var * (2.0f64 / 39.0).sqrt(), "p={p}: variance {v} vs {var}");
    }
    assert!(run::draw(&plan(500, 0.0, Sampling::PerTensor), &t, 1).iter().all(|d| !d.selected));
    assert!(run::draw(&plan(500, 1.0, Sampling::PerTensor), &t, 1).iter().all(|d| d.selected));
}

fn chi_square(observed: &[u64], expected: &[f64]) -> f64 {
    observed.iter().zip(expected).map(|(o, e)| (*o as f64 - e).powi(2) / e).sum()
}

/// Per-element sampling hits every element equally often (chi-square over tensors of very
/// different sizes, and over the elements of one tensor); per-tensor sampling hits every tensor
/// equally often whatever its size.
#[test]
fn sampling_is_uniform() {
    let sizes = [1usize, 10, 100, 1000, 4000];
    let t = targets(&sizes);
    let total: usize = sizes.iter().sum();
    let n = 200_000u64;
    let tally = |draws: &[Draw]| {
        let mut per_t = vec![0u64; sizes.len()];
        let mut per_el: HashMap<(usize, usize), u64> = HashMap::new();
        for d in draws {
            per_t[d.target] += 1;
            *per_el.entry((d.target, d.index)).or_default() += 1;
        }
        (per_t, per_el)
    };
    let (per_t, per_el) = tally(&run::draw(&plan(n, 1.0, Sampling::PerElement), &t, 5));
    let expected: Vec<f64> = sizes.iter().map(|&s| n as f64 * s as f64 / total as f64).collect();
    // 4 degrees of freedom: the 0.999 quantile is 18.5.
    assert!(chi_square(&per_t, &expected) < 18.5, "{per_t:?} vs {expected:?}");
    let big: Vec<u64> = (0..4000).map(|i| per_el.get(&(4, i)).copied().unwrap_or(0)).collect();
    let e = per_t[4] as f64 / 4000.0;
    // 3999 degrees of freedom: mean 3999, sd about 89; 4.5 sd above is 4400.
    assert!(chi_square(&big, &vec![e; 4000]) < 4400.0);
    let (per_t, _) = tally(&run::draw(&plan(n, 1.0, Sampling::PerTensor), &t, 6));
    assert!(chi_square(&per_t, &[n as f64 / 5.0; 5]) < 18.5, "{per_t:?}");
}

/// The same seed gives the same draws, bits and records; another seed does not.
#[test]
fn same_seed_same_corruption() {
    let values: Vec<f32> = (0..500).map(|i| i as f32 * 0.01 - 2.0).collect();
    let p = Plan {
        model: FaultModel { mode: Mode::BitRange { first: Some(1), last: Some(20), burst: 2 }, ..Default::default() },
        ..plan(300, 0.7, Sampling::PerElement)
    };
    let go = |seed| {
        let mut a = values.clone();
        let r = resilab_inject::inject_f32(&p, &mut [("a", &mut a[..])], seed);
        (a, r)
    };
    let (a1, r1) = go(11);
    let (a2, r2) = go(11);
    let (a3, _) = go(12);
    assert_eq!(a1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), a2.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    // Records hold NaN values, which are not equal to themselves: compare their JSON.
    assert!(serde_json::to_string(&r1).unwrap() == serde_json::to_string(&r2).unwrap(), "records differ between runs with one seed");
    assert_ne!(a1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), a3.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    // Every corrupted record's stored change is exactly its logged bits (f32 at f32 precision).
    for r in r1.iter().filter(|r| r.outcome == Outcome::Corrupted) {
        assert_eq!(r.stored_bits_changed, r.bits_ieee);
    }
}
